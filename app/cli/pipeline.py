"""`hubstream pipeline ...`: run a pipeline and operate on its offsets and commit log.

Writers are named NAME/WRITER (pipeline, then writer). Commands talk to the pipeline process's HTTP
API (`--url`, default http://WEB_HOST:PIPELINE_WEB_PORT). When no process serves the pipeline there,
reads (status, log, offsets) come straight from Kafka (said on stderr), a mark is sent as a control
record the pipeline applies when it starts, and pause / resume / step fail with a message.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click
import orjson

from app.cli.common import URL, HubstreamGroup, echo_json, run_faust_worker
from app.cli.pipeline_client import PipelineClient, default_url
from app.errors import InvalidInput, NotFound, ServiceUnavailable
from app.pipeline.api_models import CommitLog, entry_view, reader_view, writer_state_view
from app.pipeline.errors import InvalidDefinition, UnknownPipeline, UnknownWriter
from app.settings import Settings, get_settings
from app.web.models import to_wire

if TYPE_CHECKING:
    from app.pipeline.definition import PipelineDefinition

__all__ = ["pipeline"]


def _topics(settings: Settings, name: str):  # type: ignore[no-untyped-def]
    from app.pipeline.kafka_log import PipelineTopics

    return PipelineTopics.of(name, settings.app_id)


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _writer_ref(ref: str) -> tuple[str, str]:
    name, sep, writer = ref.partition("/")
    if not sep or not name or not writer:
        raise InvalidInput(f"writer {ref!r}: use NAME/WRITER (pipeline name, slash, writer name)")
    return name, writer


def _state(settings: Settings, name: str) -> dict[str, object]:
    from app.kafka.admin import KafkaAdmin
    from app.kafka.broker import broker_for
    from app.pipeline.state import read_state

    topics = _topics(settings, name)
    if topics.log not in KafkaAdmin(settings.bootstrap).topics():
        raise UnknownPipeline(f"no pipeline named {name!r} (no topic {topics.log})")
    return read_state(broker_for(settings), topics.changelog, topics.control, topics.app_id)


def _send(settings: Settings, name: str, record: dict[str, object]) -> None:
    from app.pipeline.state import ControlChannel

    ControlChannel(settings.bootstrap, _topics(settings, name).control).send_blocking([record])


def _client() -> PipelineClient:
    settings = get_settings()
    url = click.get_current_context().meta.get("pipeline_url") or default_url(settings)
    token = settings.admin_token.get_secret_value() if settings.admin_token else None
    return PipelineClient(url, token)


def _live(path: str, query: dict[str, int] | None = None) -> Any:
    """GET from the pipeline process, or None (said on stderr) when no process serves the pipeline."""
    client = _client()
    try:
        return client.get(path, query)
    except (ServiceUnavailable, NotFound) as exc:
        if isinstance(exc, UnknownWriter):
            raise
        click.echo(f"note: {exc}; reading the state from Kafka instead", err=True)
        return None


@click.group(cls=HubstreamGroup)
@click.option(
    "--url",
    type=URL,
    default=None,
    help="The pipeline process's HTTP API (default http://WEB_HOST:PIPELINE_WEB_PORT).",
)
@click.pass_context
def pipeline(ctx: click.Context, url: str | None) -> None:
    """At-least-once pipelines: reader -> commit log -> per-writer filters/transforms -> writers."""
    ctx.meta["pipeline_url"] = url


@pipeline.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--loglevel", default="info", show_default=True)
@click.option(
    "--exit-when-idle", is_flag=True, help="Stop once the reader is done and every writer caught up."
)
@click.option(
    "--web-port", type=int, default=None, help="Port of its HTTP API (default PIPELINE_WEB_PORT, 8083)."
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="A live view of the reader and each writer (default: PIPELINE_PROGRESS, else when stderr is a tty).",
)
def run(file: Path, loglevel: str, exit_when_idle: bool, web_port: int | None, progress: bool | None) -> None:
    """Run the pipeline defined in FILE (.yaml/.yml or a .py module defining PIPELINE)."""
    from agents import build_worker
    from app.pipeline.service import ensure_topics

    base = get_settings()
    definition = _load(file)
    topics = _topics(base, definition.name)
    settings = base.model_copy(
        update={
            "app_id": topics.app_id,
            "pipeline_file": file.resolve(),
            "pipeline_exit_when_idle": exit_when_idle,
            # its own port (a worker may use WEB_PORT), which also names its datadir
            "web_port": web_port or base.pipeline_web_port,
            "pipeline_progress": base.pipeline_progress or sys.stderr.isatty()
            if progress is None
            else progress,
        }
    )
    # Faust's own settings take WEB_PORT from the environment over the app's configuration: a
    # WEB_PORT inherited from a worker's environment (`hubstream run` starts the mirror pipeline
    # so) would put this process on the worker's port.
    os.environ["WEB_PORT"] = str(settings.web_port)
    ensure_topics(settings, topics)
    worker = build_worker(settings, ["pipelines"])
    # web host/port come from the app's configuration (Worker() takes no web_port argument).
    try:
        run_faust_worker(worker.app, loglevel)
    except SystemExit as done:
        host = worker.pipeline_host
        if done.code in (0, None) and host is not None and host.exit_code:
            click.echo(
                f"pipeline {definition.name}: stopped idle with a failed writer (see status)", err=True
            )
            raise SystemExit(host.exit_code) from None
        raise


def _load(file: Path) -> PipelineDefinition:
    """The definition in FILE, or each of its problems on a line of its own (`error: …`), exit 2."""
    from app.pipeline.definition import load_definition

    try:
        return load_definition(file)
    except InvalidDefinition as exc:
        for problem in exc.problems or (str(exc),):
            click.echo(f"error: {problem}", err=True)
        sys.exit(2)


@pipeline.command("check")
@click.argument("file", type=click.Path(path_type=Path))
def check(file: Path) -> None:
    """Validate the pipeline defined in FILE (keys, types, transforms) without running it."""
    definition = _load(file)
    count = len(definition.writers)
    click.echo(f"ok: {definition.name} ({count} writer{'' if count == 1 else 's'})")


@pipeline.command("schema")
def schema() -> None:
    """The JSON schema of a pipeline definition (for editors; also docs/pipeline.schema.json)."""
    from app.pipeline.definition_models import definition_schema

    click.echo(definition_schema(), nl=False)


@pipeline.command("status")
@click.argument("name")
def status(name: str) -> None:
    """Reader position and mode per namespace, each writer's state, offset, lag and last error."""
    live = _live(f"/pipelines/{_q(name)}/status")
    if live is not None:
        echo_json(live)
        return
    from app.kafka.broker import broker_for
    from app.pipeline.kafka_log import log_end
    from app.pipeline.state import split_states

    settings = get_settings()
    writers, readers = split_states(_state(settings, name))  # type: ignore[arg-type]
    topics = _topics(settings, name)
    end = log_end(broker_for(settings), topics.log)
    echo_json(  # the live status's keys, as far as Kafka knows them
        {
            "pipeline": name,
            "state": "unreachable",
            "commitLog": to_wire(CommitLog(topic=topics.log, end_offset=end)),
            "reader": {ns: to_wire(reader_view(r)) for ns, r in sorted(readers.items())},
            "writers": {
                w: {
                    **to_wire(writer_state_view(s)),
                    "lag": max(end - s.next_offset, 0),
                    "stopped": s.failed is not None,
                }
                for w, s in sorted(writers.items())
            },
        }
    )


@pipeline.group("log", cls=HubstreamGroup)
def log_group() -> None:
    """The pipeline's commit log."""


def _log_entries(name: str, first: int, last: int) -> list[dict[str, Any]]:
    """Through the HTTP API, MAX_LOG_RANGE entries a request; from Kafka when no process serves it."""
    from app.pipeline.operator import MAX_LOG_RANGE

    entries: list[dict[str, Any]] = []
    position = first
    while position <= last:
        to = min(position + MAX_LOG_RANGE - 1, last)
        page = _live(f"/pipelines/{_q(name)}/log", {"from": position, "to": to})
        if page is None:
            return entries + _kafka_log(name, position, last)
        entries.extend(page["entries"])
        if to >= page["endOffset"] - 1:
            break
        position = to + 1
    return entries


def _kafka_log(name: str, first: int, last: int) -> list[dict[str, Any]]:
    from app.kafka.broker import broker_for
    from app.pipeline.kafka_log import read_log_range

    settings = get_settings()
    _state(settings, name)
    topic = _topics(settings, name).log
    entries = read_log_range(broker_for(settings), topic, first, last)
    return [to_wire(entry_view(e)) for e in entries]


@log_group.command("show")
@click.argument("name")
@click.option("--from", "first", type=int, default=0, show_default=True)
@click.option("--to", "last", type=int, default=None, help="Last offset (inclusive); default first + 99.")
def log_show(name: str, first: int, last: int | None) -> None:
    """Entries of the commit log from offset X to Y, one JSON object per line."""
    if first < 0 or (last is not None and last < first):
        raise InvalidInput("--from must be >= 0 and --to >= --from")
    for entry in _log_entries(name, first, first + 99 if last is None else last):
        click.echo(orjson.dumps(entry, default=str).decode())


@pipeline.group("offset", cls=HubstreamGroup)
def offset_group() -> None:
    """Writer offsets (the seed's offset log)."""


def _writer_states(name: str) -> dict[str, dict[str, Any]]:
    live = _live(f"/pipelines/{_q(name)}/offsets")
    if live is not None:
        writers: dict[str, dict[str, Any]] = live["writers"]
        return writers
    from app.pipeline.state import split_states

    states, _ = split_states(_state(get_settings(), name))  # type: ignore[arg-type]
    return {w: to_wire(writer_state_view(s)) for w, s in states.items()}


@offset_group.command("list")
@click.argument("name")
def offset_list(name: str) -> None:
    """Every writer's offset in pipeline NAME."""
    echo_json({w: s["offset"] for w, s in sorted(_writer_states(name).items())})


@offset_group.command("show")
@click.argument("writer")
def offset_show(writer: str) -> None:
    """One writer (NAME/WRITER): offset, failed range, per-namespace offsets."""
    name, writer_name = _writer_ref(writer)
    writers = _writer_states(name)
    if writer_name not in writers:
        raise UnknownWriter(f"pipeline {name} has no committed offset for writer {writer_name!r}")
    echo_json({"writer": writer, **writers[writer_name]})


@offset_group.command("mark")
@click.argument("writer")
@click.argument("offset", type=int)
def offset_mark(writer: str, offset: int) -> None:
    """Mark everything up to OFFSET acknowledged for NAME/WRITER without sending it (sent as a control
    record, applied when the pipeline starts, when no process serves it)."""
    name, writer_name = _writer_ref(writer)
    try:
        echo_json(_client().post(_writer_path(name, writer_name, "offset"), {"offset": offset}))
        return
    except (ServiceUnavailable, UnknownPipeline) as exc:
        click.echo(f"note: {exc}; sending the mark as a control record", err=True)
    from app.kafka.broker import broker_for
    from app.pipeline.kafka_log import log_end

    settings = get_settings()
    _state(settings, name)
    end = log_end(broker_for(settings), _topics(settings, name).log)
    if not -1 <= offset < end:
        raise InvalidInput(f"offset {offset} is outside -1..{end - 1} of the commit log")
    _send(settings, name, {"kind": "mark", "writer": writer_name, "offset": offset})
    echo_json({"sent": "mark", "writer": writer, "offset": offset})


def _writer_path(name: str, writer: str, action: str) -> str:
    return f"/pipelines/{_q(name)}/writers/{_q(writer)}/{action}"


@pipeline.command("step")
@click.argument("writer")
def step(writer: str) -> None:
    """Have the running pipeline write the next message of the stopped (paused or failed) NAME/WRITER."""
    name, writer_name = _writer_ref(writer)
    echo_json(_client().post(_writer_path(name, writer_name, "step")))


@pipeline.command("pause")
@click.argument("name")
@click.option("--writer", default=None, help="Only this writer (default: every running writer).")
def pause(name: str, writer: str | None) -> None:
    """Pause writers of the running pipeline: they stop after their confirmed writes, keep their offset."""
    path = _writer_path(name, writer, "pause") if writer else f"/pipelines/{_q(name)}/pause"
    echo_json(_client().post(path))


@pipeline.command("resume")
@click.argument("name")
@click.option("--writer", default=None, help="Only this writer (default: every stopped writer).")
def resume(name: str, writer: str | None) -> None:
    """Restart paused or stopped writers of the running pipeline (a failed range is replayed one
    at a time)."""
    path = _writer_path(name, writer, "resume") if writer else f"/pipelines/{_q(name)}/resume"
    echo_json(_client().post(path))
