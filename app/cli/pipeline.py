"""`hubstream pipeline ...`: run a pipeline and operate on its offsets and commit log.

Writers are named NAME/WRITER (pipeline, then writer). Reads (status, log, offsets) come straight
from Kafka; changes (mark, step, resume) are control records the running pipeline applies (a
mark sent while it is stopped is applied when it starts).
"""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from app.cli.common import HubstreamGroup, echo_json
from app.errors import InvalidInput
from app.settings import Settings, get_settings

__all__ = ["pipeline"]


def _topics(settings: Settings, name: str):  # type: ignore[no-untyped-def]
    from app.pipeline.kafka_log import PipelineTopics

    return PipelineTopics.of(name, settings.app_id)


def _writer_ref(ref: str) -> tuple[str, str]:
    name, sep, writer = ref.partition("/")
    if not sep or not name or not writer:
        raise InvalidInput(f"writer {ref!r}: use NAME/WRITER (pipeline name, slash, writer name)")
    return name, writer


def _state(settings: Settings, name: str) -> dict[str, object]:
    from app.kafka.admin import KafkaAdmin
    from app.pipeline.errors import UnknownPipeline
    from app.pipeline.state import read_state

    topics = _topics(settings, name)
    if topics.log not in KafkaAdmin(settings.bootstrap).topics():
        raise UnknownPipeline(f"no pipeline named {name!r} (no topic {topics.log})")
    return read_state(settings.bootstrap, topics.changelog, topics.control, topics.app_id)


def _send(settings: Settings, name: str, record: dict[str, object]) -> None:
    from app.pipeline.state import ControlChannel

    ControlChannel(settings.bootstrap, _topics(settings, name).control).send_blocking([record])


@click.group(cls=HubstreamGroup)
def pipeline() -> None:
    """At-least-once pipelines: reader -> commit log -> per-writer filters/transforms -> writers."""


@pipeline.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--loglevel", default="info", show_default=True)
@click.option(
    "--exit-when-idle", is_flag=True, help="Stop once the reader is done and every writer caught up."
)
def run(file: Path, loglevel: str, exit_when_idle: bool) -> None:
    """Run the pipeline defined in FILE (.yaml/.yml or a .py module defining PIPELINE)."""
    from faust.worker import Worker

    from app.pipeline.definition import load_definition
    from app.pipeline.service import ensure_topics
    from app.worker.factory import create_app

    base = get_settings()
    definition = load_definition(file)
    topics = _topics(base, definition.name)
    settings = base.model_copy(
        update={
            "app_id": topics.app_id,
            "pipeline_file": file.resolve(),
            "pipeline_exit_when_idle": exit_when_idle,
        }
    )
    ensure_topics(settings, topics)
    app = create_app(settings, capabilities=["agents.pipelines"])
    # web host/port come from the app's configuration (Worker() takes no web_port argument).
    try:
        Worker(app, loglevel=loglevel).execute_from_commandline()
    except SystemExit as done:
        host = getattr(app, "pipeline_host", None)
        if done.code in (0, None) and host is not None and host.exit_code:
            click.echo(
                f"pipeline {definition.name}: stopped idle with a failed writer (see status)", err=True
            )
            raise SystemExit(host.exit_code) from None
        raise


@pipeline.command("status")
@click.argument("name")
def status(name: str) -> None:
    """Reader position and mode per namespace, each writer's offset and lag."""
    from app.kafka.admin import true_end_offsets
    from app.pipeline.state import split_states

    settings = get_settings()
    writers, readers = split_states(_state(settings, name))  # type: ignore[arg-type]
    topics = _topics(settings, name)
    end = true_end_offsets(settings.bootstrap, [(topics.log, 0)])[0]
    echo_json(
        {
            "pipeline": name,
            "commit_log": {"topic": topics.log, "end_offset": end},
            "reader": {ns: r.to_json() for ns, r in sorted(readers.items())},
            "writers": {
                w: {**s.to_json(), "lag": max(end - s.next_offset, 0), "stopped": s.failed is not None}
                for w, s in sorted(writers.items())
            },
        }
    )


@pipeline.group("log", cls=HubstreamGroup)
def log_group() -> None:
    """The pipeline's commit log."""


@log_group.command("show")
@click.argument("name")
@click.option("--from", "first", type=int, default=0, show_default=True)
@click.option("--to", "last", type=int, default=None, help="Last offset (inclusive); default first + 99.")
def log_show(name: str, first: int, last: int | None) -> None:
    """Entries of the commit log from offset X to Y, one JSON object per line."""
    from app.pipeline.kafka_log import read_log_range

    if first < 0 or (last is not None and last < first):
        raise InvalidInput("--from must be >= 0 and --to >= --from")
    settings = get_settings()
    _state(settings, name)
    for entry in read_log_range(
        settings.bootstrap, _topics(settings, name).log, first, first + 99 if last is None else last
    ):
        value = entry.value
        click.echo(
            orjson.dumps(
                {
                    "offset": entry.offset,
                    "timestamp_ms": entry.timestamp_ms,
                    "mode": entry.mode.name.lower(),
                    "key": entry.key,
                    "value": {"op": value.op.value, "namespace": value.namespace, "data": value.data},
                    "position": entry.position,
                },
                default=str,
            ).decode()
        )


@pipeline.group("offset", cls=HubstreamGroup)
def offset_group() -> None:
    """Writer offsets (the seed's offset log)."""


@offset_group.command("list")
@click.argument("name")
def offset_list(name: str) -> None:
    """Every writer's offset in pipeline NAME."""
    from app.pipeline.state import split_states

    writers, _ = split_states(_state(get_settings(), name))  # type: ignore[arg-type]
    echo_json({w: s.offset for w, s in sorted(writers.items())})


@offset_group.command("show")
@click.argument("writer")
def offset_show(writer: str) -> None:
    """One writer (NAME/WRITER): offset, failed range, per-namespace offsets."""
    from app.pipeline.errors import UnknownWriter
    from app.pipeline.state import split_states

    name, writer_name = _writer_ref(writer)
    writers, _ = split_states(_state(get_settings(), name))  # type: ignore[arg-type]
    if writer_name not in writers:
        raise UnknownWriter(f"pipeline {name} has no committed offset for writer {writer_name!r}")
    echo_json({"writer": writer, **writers[writer_name].to_json()})


@offset_group.command("mark")
@click.argument("writer")
@click.argument("offset", type=int)
def offset_mark(writer: str, offset: int) -> None:
    """Mark everything up to OFFSET acknowledged for NAME/WRITER without sending it."""
    from app.kafka.admin import true_end_offsets

    name, writer_name = _writer_ref(writer)
    settings = get_settings()
    _state(settings, name)
    end = true_end_offsets(settings.bootstrap, [(_topics(settings, name).log, 0)])[0]
    if not -1 <= offset < end:
        raise InvalidInput(f"offset {offset} is outside -1..{end - 1} of the commit log")
    _send(settings, name, {"kind": "mark", "writer": writer_name, "offset": offset})
    echo_json({"sent": "mark", "writer": writer, "offset": offset})


@pipeline.command("step")
@click.argument("writer")
def step(writer: str) -> None:
    """Have the running pipeline process one message for NAME/WRITER (stopping it first)."""
    name, writer_name = _writer_ref(writer)
    settings = get_settings()
    _state(settings, name)
    _send(settings, name, {"kind": "step", "writer": writer_name})
    echo_json({"sent": "step", "writer": writer})


@pipeline.command("resume")
@click.argument("name")
@click.option("--writer", default=None, help="Only this writer (default: every stopped writer).")
def resume(name: str, writer: str | None) -> None:
    """Restart stopped writers of the running pipeline (a failed range is replayed one at a time)."""
    settings = get_settings()
    _state(settings, name)
    _send(settings, name, {"kind": "resume", "writer": writer})
    echo_json({"sent": "resume", "pipeline": name, "writer": writer})
