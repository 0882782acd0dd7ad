"""Pipeline definitions are validated: unknown keys (with the closest known key) and wrong types are
refused with their path, every problem of a definition at once; what is valid today stays valid."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from app.cli.main import cli
from app.pipeline.chain import NamespaceFilter, TransformStep
from app.pipeline.definition import definition_from_mapping, load_definition
from app.pipeline.definition_models import READER_MODELS, STEP_MODELS, WRITER_MODELS, PipelineModel
from app.pipeline.errors import InvalidDefinition
from app.pipeline.model import Message

ROOT = Path(__file__).resolve().parents[3]


def keep(message: Message) -> Message:
    return message


def _base() -> dict[str, Any]:
    return {
        "name": "p",
        "reader": {"type": "mysql", "tables": [{"name": "orders", "sync_column": "id"}]},
        "writers": [
            {
                "name": "mirror",
                "type": "mysql",
                "table": "orders",
                "steps": [{"namespace": "^shop"}, {"transform": keep}],
            }
        ],
    }


def _problems(raw: Any) -> tuple[str, ...]:
    with pytest.raises(InvalidDefinition) as refused:
        definition_from_mapping(raw)
    return refused.value.problems


def _with(path: tuple[str | int, ...], key: str, value: Any) -> dict[str, Any]:
    raw = _base()
    node: Any = raw
    for part in path:
        node = node[part]
    node[key] = value
    return raw


@pytest.mark.parametrize(
    ("where", "key", "said"),
    [
        (
            ("writers", 0),
            "colunms",
            "writers.mirror.colunms: unknown key 'colunms' (did you mean 'columns'?)",
        ),
        (
            ("writers", 0),
            "errors_tolerence",
            "writers.mirror.errors_tolerence: unknown key 'errors_tolerence'"
            " (did you mean 'errors_tolerance'?)",
        ),
        ((), "batch_sise", "batch_sise: unknown key 'batch_sise' (did you mean 'batch_size'?)"),
        (("reader",), "pol_s", "reader.pol_s: unknown key 'pol_s' (did you mean 'poll_s'?)"),
        (
            ("reader", "tables", 0),
            "sync_colum",
            "reader.tables[0].sync_colum: unknown key 'sync_colum' (did you mean 'sync_column'?)",
        ),
        (
            ("writers", 0, "steps", 0),
            "zzz",
            "writers.mirror.steps[0].zzz: unknown key 'zzz'; known keys: namespace",
        ),
    ],
)
def test_a_typo_is_refused_with_its_path_and_the_closest_key(
    where: tuple[str | int, ...], key: str, said: str
) -> None:
    assert _problems(_with(where, key, ["id"])) == (said,)


def test_every_problem_is_reported_at_once() -> None:
    raw = _with((), "batch_sise", 10)
    raw["writers"][0].update(colunms=["id"], errors_tolerence="all", key=5)
    raw["writers"].append({"name": "mirror", "type": "jsonl", "path": "out.jsonl"})
    raw["reader"]["poll_s"] = "fast"
    assert set(_problems(raw)) == {
        "batch_sise: unknown key 'batch_sise' (did you mean 'batch_size'?)",
        "reader.poll_s: must be a number, got 'fast'",
        "writers[0].colunms: unknown key 'colunms' (did you mean 'columns'?)",
        "writers[0].errors_tolerence: unknown key 'errors_tolerence' (did you mean 'errors_tolerance'?)",
        "writers[0].key: must be a list, got 5",
        "writers[1]: writer name 'mirror' is used twice",
    }
    with pytest.raises(InvalidDefinition) as refused:
        definition_from_mapping(raw)
    assert str(refused.value) == "\n".join(refused.value.problems)


@pytest.mark.parametrize(
    ("where", "key", "value", "said"),
    [
        ((), "batch_size", "many", "batch_size: must be an integer, got 'many'"),
        ((), "batch_size", True, "batch_size: must be an integer, got True"),
        ((), "batch_size", 0, "batch_size: must be greater than or equal to 1, got 0"),
        ((), "batch_wait_s", -1, "batch_wait_s: must be greater than or equal to 0, got -1"),
        ((), "name", 5, "name: must be a string, got 5"),
        ((), "writers", [], "writers: must not be empty"),
        (("reader",), "poll_s", True, "reader.poll_s: must be a number, got True"),
        (("reader",), "tables", 5, "reader.tables: must be a list, got 5"),
        (("writers", 0), "key", [], "writers.mirror.key: must not be empty"),
        (("writers", 0), "columns", {"id": 1}, "writers.mirror.columns: must be a list"),
        (
            ("writers", 0),
            "errors_tolerance",
            "some",
            "writers.mirror.errors_tolerance: must be 'none' or 'all', got 'some'",
        ),
        (
            ("writers", 0),
            "type",
            "mysq",
            "writers.mirror: unknown type 'mysq' (did you mean 'mysql'?); one of cosmos, jsonl, kafka, mysql",
        ),
        (
            ("writers", 0),
            "namespace",
            "x",
            "writers.mirror: give steps, or the shorthand namespace and transforms, not both",
        ),
        (("writers", 0, "steps", 0), "namespace", "(", "writers.mirror.steps[0].namespace: bad regex '('"),
        (
            ("writers", 0, "steps", 1),
            "transform",
            "nope",
            "writers.mirror.steps[1].transform: transform 'nope' must be",
        ),
    ],
)
def test_a_wrong_type_or_value_is_refused_with_its_path(
    where: tuple[str | int, ...], key: str, value: Any, said: str
) -> None:
    problems = _problems(_with(where, key, value))
    assert len(problems) == 1 and problems[0].startswith(said), problems


def test_other_kinds_check_their_own_options() -> None:
    raw: dict[str, Any] = {
        "name": "p",
        "reader": {"type": "jsonl", "path": "in.jsonl", "follow": "yes"},
        "writers": [
            {"name": "bus", "type": "kafka", "topic": "t", "partitions": "3"},
            {"name": "docs", "type": "cosmos", "container": "c", "partition_key": "a/b", "concurrency": 0},
            {"type": "jsonl", "path": "out.jsonl"},
            {"name": "x", "type": "jsonl", "steps": [{"namepsace": "a"}]},
        ],
    }
    assert _problems(raw) == (
        "reader.follow: must be true or false, got 'yes'",
        "writers.bus.partitions: must be an integer, got '3'",
        "writers.docs.partition_key: 'a/b': use a top-level path like /id",
        "writers.docs.concurrency: must be greater than or equal to 1, got 0",
        "writers[2]: missing key 'name'",
        "writers.x.steps[0]: expected {namespace: REGEX} or {transform: 'module:function'};"
        " unknown key 'namepsace' (did you mean 'namespace'?)",
        "writers.x: missing key 'path'",
    )
    assert _problems(
        {"name": "p", "reader": {"type": "binlog", "tables": "("}, "writers": raw["writers"][:1]}
    )[0].startswith("reader.tables: bad regex '('")
    assert _problems({**_base(), True: 1}) == ("unknown key True (keys are text: quote it in YAML)",)
    assert _problems([]) == ("a pipeline definition is a mapping with name, reader and writers, got []",)


def test_a_single_string_is_one_column_never_its_characters() -> None:
    raw = _base()
    raw["reader"]["tables"] = "orders"
    raw["writers"][0].update(key="id", columns="id")
    definition = definition_from_mapping(raw)
    assert definition.reader.options == {"tables": [{"name": "orders"}]}
    assert definition.writers[0].component.options == {"table": "orders", "key": ["id"], "columns": ["id"]}
    raw["reader"]["tables"] = ["orders", {"name": "lines", "primary_key": "line_id"}]
    tables = definition_from_mapping(raw).reader.options["tables"]
    assert tables == [{"name": "orders"}, {"name": "lines", "primary_key": ["line_id"]}]


def test_the_runtime_gets_only_what_the_definition_set() -> None:
    definition = definition_from_mapping(_base())
    writer = definition.writers[0]
    assert definition.reader.options == {"tables": [{"name": "orders", "sync_column": "id"}]}
    assert writer.component.options == {"table": "orders"}  # defaults stay the reader's and sink's
    assert isinstance(writer.branch.steps[0], NamespaceFilter) and writer.branch.steps[0].pattern == "^shop"
    assert isinstance(writer.branch.steps[1], TransformStep) and writer.branch.steps[1].function is keep
    shorthand = _base()
    shorthand["writers"][0].pop("steps")
    shorthand["writers"][0].update(namespace="^x", transforms=[keep])
    steps = definition_from_mapping(shorthand).writers[0].branch.steps
    assert [type(s) for s in steps] == [NamespaceFilter, TransformStep]


@pytest.mark.parametrize(
    "path", sorted((ROOT / "examples" / "pipelines").glob("*.y*ml")), ids=lambda p: p.name
)
def test_every_example_definition_loads(path: Path) -> None:
    assert load_definition(path).writers


IN_USE = [  # the shapes the integration tests and the docs run (transforms checked as text only)
    "name: a\nbatch_size: 20\nreader: {type: cosmos, container: c, database: d, poll_s: 0.2}\n"
    "writers:\n  - {name: db, type: mysql, table: t, columns: [id, pk, last, used, ack]}\n",
    "name: b\nbatch_size: 50\nreader: {type: binlog, tables: '^src\\.t$'}\nwriters:\n"
    "  - {name: db, type: mysql, table: t, columns: [id, name], transforms: ['throttle.py:throttle']}\n"
    "  - {name: file, type: jsonl, path: out.jsonl}\n",
    "name: c\nbatch_size: 8\nbatch_wait_s: 0.05\nreader: {type: jsonl, path: in.jsonl, namespace: docs}\n"
    "writers:\n  - name: db\n    type: mysql\n    table: t\n    columns: [id, seq]\n"
    "    errors_tolerance: all\n    transforms: ['transforms.py:refuse_poison', 'transforms.py:nan_seq']\n",
    "name: d\nreader: {type: jsonl, path: in.jsonl, namespace: docs, follow: true, poll_s: 0.1}\nwriters:\n"
    "  - {name: bus, type: kafka, topic: t, key_field: id}\n  - {name: file, type: jsonl, path: out.jsonl}\n",
    "name: e\nreader: {type: mysql, tables: [{name: t, sync_column: id}], poll_s: 0.2}\nwriters:\n"
    "  - {name: docs, type: cosmos, container: c, database: d, partition_key: /id,"
    " transforms: ['throttle.py:throttle']}\n",
    "name: f\nreader: {type: composite, topic: data-available}\nwriters:\n  - name: db\n    type: mysql\n"
    "    table: t\n    steps:\n      - namespace: '^data-available$'\n"
    "      - transform: mypkg.transforms:only\n"
    "    errors_tolerance: none\n",
]


@pytest.mark.parametrize("text", IN_USE)
def test_the_definitions_in_use_stay_valid(text: str) -> None:
    import yaml

    PipelineModel.model_validate(yaml.safe_load(text))  # without loading the transforms


def test_check_says_ok_for_a_valid_file() -> None:
    example = ROOT / "examples" / "pipelines" / "data_available_mysql.yaml"
    result = CliRunner().invoke(cli, ["pipeline", "check", str(example)])
    assert result.exit_code == 0, result.output
    assert result.output == "ok: data-available-mysql (1 writer)\n"


def test_check_prints_each_problem_and_exits_2(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\nbatch_sise: 5\nreader: {type: jsonl, path: in.jsonl}\n"
        "writers:\n  - {name: mirror, type: mysql, table: t, colunms: [id]}\n"
    )
    result = CliRunner().invoke(cli, ["pipeline", "check", str(file)])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "error: writers.mirror.colunms: unknown key 'colunms' (did you mean 'columns'?)",
        "error: batch_sise: unknown key 'batch_sise' (did you mean 'batch_size'?)",
    ]
    missing = CliRunner().invoke(cli, ["pipeline", "check", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and missing.output == f"error: {tmp_path / 'none.yaml'}: no such file\n"


def test_the_committed_schema_is_what_the_command_prints() -> None:
    result = CliRunner().invoke(cli, ["pipeline", "schema"])
    assert result.exit_code == 0, result.output
    committed = (ROOT / "docs" / "pipeline.schema.json").read_text(encoding="utf-8")
    assert result.output == committed, "regenerate: hubstream pipeline schema > docs/pipeline.schema.json"


LEVELS: list[tuple[tuple[str | int, ...], str, frozenset[str]]] = [
    ((), "", frozenset(PipelineModel.model_fields)),
    (("reader",), "reader.", frozenset(READER_MODELS["mysql"].model_fields)),
    (("reader", "tables", 0), "reader.tables[0].", frozenset({"name", "sync_column", "primary_key"})),
    (("writers", 0), "writers.mirror.", frozenset(WRITER_MODELS["mysql"].model_fields)),
    (("writers", 0, "steps", 0), "writers.mirror.steps[0].", frozenset(STEP_MODELS)),
    (("writers", 0, "steps", 1), "writers.mirror.steps[1].", frozenset(STEP_MODELS)),
]


@given(
    level=st.sampled_from(LEVELS),
    key=st.text(min_size=1, max_size=12),
    value=st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)),
)
def test_any_unknown_key_at_any_level_is_refused_by_name(
    level: tuple[tuple[str | int, ...], str, frozenset[str]], key: str, value: Any
) -> None:
    where, path, known = level
    if key in known:
        return
    raw = _with(where, key, copy.deepcopy(value))
    problems = _problems(raw)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}{key}: unknown key {key!r}"), problems


def test_a_change_feed_category_needs_the_event_store_mode() -> None:
    reader = {"type": "cosmos", "container": "events", "category": "Favorites"}
    [problem] = _problems({**_base(), "reader": reader})
    assert problem.startswith("reader") and "category needs events: true" in problem
    definition_from_mapping({**_base(), "reader": {**reader, "events": True}})
