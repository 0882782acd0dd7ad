"""The built-in transforms (pick, omit, rename, skip): what each does to a message, and how a
definition names them and has its mistakes refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.pipeline.builtin_transforms import SKIP_OPERATORS, omit, pick, rename, skip
from app.pipeline.chain import Branch
from app.pipeline.definition import definition_from_mapping
from app.pipeline.errors import InvalidDefinition
from app.pipeline.model import Message, Op

rows = st.dictionaries(st.sampled_from("abcdef"), st.integers(-5, 5) | st.text(max_size=3), max_size=6)
names = st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=4)


def message(data: dict[str, Any], op: Op = Op.UPDATE) -> Message:
    return Message(op, 1, "shop.orders", data, before={"a": "before"})


@given(rows, names)
def test_pick_keeps_exactly_the_named_fields_and_omit_exactly_the_others(
    data: dict[str, Any], fields: list[str]
) -> None:
    picked, omitted = pick(fields)(message(data)), omit(fields)(message(data))
    assert picked is not None and omitted is not None
    assert picked.data == {k: v for k, v in data.items() if k in fields}
    assert omitted.data == {k: v for k, v in data.items() if k not in fields}
    assert {**picked.data, **omitted.data} == data
    assert picked.before == omitted.before == {"a": "before"}  # only data is changed
    assert (picked.op, picked.namespace, picked.timestamp_ms) == (Op.UPDATE, "shop.orders", 1)


@given(rows)
def test_rename_moves_values_to_their_new_names(data: dict[str, Any]) -> None:
    renamed = rename({"a": "x", "b": "y"})(message(data))
    assert renamed is not None
    expected = {k: v for k, v in data.items() if k not in ("a", "b")}
    expected.update({new: data[old] for old, new in (("a", "x"), ("b", "y")) if old in data})
    assert renamed.data == expected


@pytest.mark.parametrize(
    ("operator", "value", "passes"),
    [("==", 10, True), ("eq", 11, False), ("$ne", 11, True), (">", 9, True), ("gte", 10, True),
     ("$lt", 10, False), ("<=", 10, True)],
)  # fmt: skip
def test_skip_passes_a_message_only_when_its_rule_holds(operator: str, value: int, passes: bool) -> None:
    kept = skip("n", operator, value)(message({"n": 10}))
    assert (kept is not None) is passes


def test_skip_drops_a_message_without_the_field_or_with_a_value_it_cannot_compare() -> None:
    assert skip("n", ">", 1)(message({"m": 5})) is None
    assert skip("n", ">", 1)(message({"n": "five"})) is None
    assert {"==", "eq", "$eq", "<=", "lte", "$lte"} <= set(SKIP_OPERATORS)


def _definition(steps: list[Any]) -> dict[str, Any]:
    return {
        "name": "p",
        "reader": {"type": "jsonl", "path": "in.jsonl"},
        "writers": [{"name": "out", "type": "jsonl", "path": "out.jsonl", "steps": steps}],
    }


def test_a_definition_chains_built_in_steps_in_order() -> None:
    steps = [
        {"namespace": "^shop"},
        {"skip": {"field": "status", "operator": "==", "match": "paid"}},
        {"rename": {"total": "amount"}},
        {"omit": "secret"},
        {"pick": ["id", "amount"]},
    ]
    definition = definition_from_mapping(_definition(steps))
    branch: Branch = definition.writers[0].branch
    row = {"id": 1, "status": "paid", "total": 9, "secret": "x", "other": 2}
    out = branch.apply(message(row))
    assert out is not None and out.data == {"id": 1, "amount": 9}
    assert branch.apply(message({**row, "status": "open"})) is None


@pytest.mark.parametrize(
    ("step", "said"),
    [
        ({"pick": []}, "writers.out.steps[0].pick: must not be empty"),
        ({"rename": {"a": ""}}, "writers.out.steps[0].rename.a: String should have at least 1 character"),
        ({"skip": {"field": "a", "operator": "=~", "match": 1}}, "writers.out.steps[0].skip.operator:"),
        (
            {"skip": {"field": "a", "operator": "==", "mach": 1}},
            "writers.out.steps[0].skip.mach: unknown key",
        ),
        ({"pik": ["a"]}, "writers.out.steps[0]: expected {namespace: REGEX}"),
    ],
)
def test_a_wrong_built_in_step_is_refused_with_its_path(step: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidDefinition) as refused:
        definition_from_mapping(_definition([step]))
    assert any(problem.startswith(said) for problem in refused.value.problems), refused.value.problems
