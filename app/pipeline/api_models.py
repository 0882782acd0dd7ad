"""The pipeline process's HTTP bodies (app/pipeline/web.py), its OpenAPI operations and document."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, StrictInt, WithJsonSchema

from app.pipeline.model import LogEntry, Mode
from app.pipeline.offsets import FailedRange, ReaderState, WriterState
from app.web.models import ApiModel, RequestModel, omitted_when_none
from app.web.openapi import (
    ADMIN,
    MUTATING_ERRORS,
    Operation,
    openapi_document,
    path_param,
    query_param,
    served_by_every_process,
)

__all__ = [
    "OPERATIONS",
    "CommitLog",
    "FailedRangeView",
    "LogEntryView",
    "LogPage",
    "MarkOffset",
    "PausedAll",
    "PipelineList",
    "PipelineOffsets",
    "PipelineStatus",
    "PipelineSummary",
    "ReaderView",
    "ResumedAll",
    "WriterAnswer",
    "WriterChanged",
    "WriterStateView",
    "WriterStepped",
    "WriterSummary",
    "WriterView",
    "entry_view",
    "failed_view",
    "pipeline_openapi_document",
    "reader_view",
    "writer_state_view",
]

Phase = Literal["running", "paused", "failed", "stopped", "starting"]
ReaderMode = Literal["copy", "sync", "complete"]
MODES: dict[Mode, ReaderMode] = {Mode.COPY: "copy", Mode.SYNC: "sync", Mode.COMPLETE: "complete"}


class WriterSummary(ApiModel):
    name: str
    state: Phase
    offset: int | None = omitted_when_none()  # once the pipeline runs


class PipelineSummary(ApiModel):
    name: str
    state: str
    writers: list[WriterSummary]


class PipelineList(ApiModel):
    pipelines: list[PipelineSummary]


class FailedRangeView(ApiModel):
    first: int
    last: int
    error: str
    failed_offset: int | None


class WriterStateView(ApiModel):
    offset: int
    failed: FailedRangeView | None
    namespaces: dict[str, int]  # namespace -> offset written


class WriterView(WriterStateView):
    state: Phase
    lag: int
    stopped: bool
    last_error: str | None
    received: int
    dead_lettered: int = 0  # records this process sent to the dead-letter topic for the writer


class ReaderView(ApiModel):
    mode: ReaderMode
    position: dict[str, Any]  # the source's own position keys
    log_offset: int


class CommitLog(ApiModel):
    topic: str
    end_offset: int


class PipelineStatus(ApiModel):
    pipeline: str
    state: str
    commit_log: CommitLog
    reader_done: bool
    reader_error: str | None
    reader_refused: int = 0  # entries left out: larger than a commit-log record may be (the log says which)
    reader: dict[str, ReaderView]  # by namespace
    writers: dict[str, WriterView]  # by writer name


class PipelineOffsets(ApiModel):
    pipeline: str
    end_offset: int
    writers: dict[str, WriterStateView]
    readers: dict[str, ReaderView]


class LogValue(ApiModel):
    op: str
    namespace: str
    data: dict[str, Any]  # the document as the source gave it


class LogEntryView(ApiModel):
    offset: int
    timestamp_ms: int
    mode: ReaderMode
    key: str
    value: LogValue
    position: dict[str, Any]


class LogPage(ApiModel):
    pipeline: str
    first: int = Field(validation_alias=AliasChoices("from", "first"), serialization_alias="from")
    last: int = Field(validation_alias=AliasChoices("to", "last"), serialization_alias="to")
    end_offset: int
    entries: list[LogEntryView]


class PausedAll(ApiModel):
    pipeline: str
    paused: list[str]


class ResumedAll(ApiModel):
    pipeline: str
    resumed: list[str]


class WriterAnswer(WriterView):
    pipeline: str
    writer: str


class WriterChanged(WriterAnswer):
    changed: bool


class WriterStepped(WriterAnswer):
    stepped: int | None  # the offset written, None when there was nothing to write
    ok: bool


def failed_view(failed: FailedRange | None) -> FailedRangeView | None:
    if failed is None:
        return None
    return FailedRangeView(
        first=failed.first, last=failed.last, error=failed.error, failed_offset=failed.failed_offset
    )


def writer_state_view(state: WriterState) -> WriterStateView:
    return WriterStateView(
        offset=state.offset, failed=failed_view(state.failed), namespaces=dict(state.namespaces)
    )


def reader_view(state: ReaderState) -> ReaderView:
    return ReaderView(mode=MODES[state.mode], position=dict(state.position), log_offset=state.log_offset)


def entry_view(entry: LogEntry) -> LogEntryView:
    value = entry.value
    return LogEntryView(
        offset=entry.offset,
        timestamp_ms=entry.timestamp_ms,
        mode=MODES[entry.mode],
        key=entry.key,
        value=LogValue(op=value.op.value, namespace=value.namespace, data=dict(value.data)),
        position=dict(entry.position),
    )


class MarkOffset(RequestModel):
    offset: Annotated[StrictInt, WithJsonSchema({"type": "integer", "minimum": -1})]


TAG = "pipelines"
PIPELINE, WRITER = "/pipelines/{name}", "/pipelines/{name}/writers/{writer}"
NAME = path_param("name", description="pipeline name")
WRITER_NAME = path_param("writer", description="writer name")
READS = (404, 503)


def _writer_op(
    suffix: str, summary: str, response: type[WriterAnswer], request: type[RequestModel] | None = None
) -> Operation:
    return Operation(
        "post",
        f"{WRITER}/{suffix}",
        summary,
        TAG,
        response,
        request=request,
        params=(NAME, WRITER_NAME),
        security=ADMIN,
        errors=MUTATING_ERRORS if request is None else (*MUTATING_ERRORS, 413),
    )


OPERATIONS = [
    Operation(
        "get", "/pipelines", "The pipelines this process runs, with each writer's state", TAG, PipelineList
    ),
    Operation(
        "get",
        f"{PIPELINE}/status",
        "Reader state per namespace, each writer's state, offset, lag and last error, log end",
        TAG,
        PipelineStatus,
        params=(NAME,),
        errors=READS,
    ),
    Operation(
        "get",
        f"{PIPELINE}/offsets",
        "Writer offsets and reader states",
        TAG,
        PipelineOffsets,
        params=(NAME,),
        errors=READS,
    ),
    Operation(
        "get",
        f"{PIPELINE}/log",
        "Commit-log entries from offset `from` to `to` (inclusive; at most 1,000)",
        TAG,
        LogPage,
        params=(
            NAME,
            query_param("from", {"type": "integer", "minimum": 0}, description="default 0"),
            query_param("to", {"type": "integer", "minimum": 0}, description="default from + 99"),
        ),
        security=ADMIN,
        errors=(400, 401, *READS),
    ),
    Operation(
        "post",
        f"{PIPELINE}/pause",
        "Pause every running writer",
        TAG,
        PausedAll,
        params=(NAME,),
        security=ADMIN,
        errors=MUTATING_ERRORS,
    ),
    Operation(
        "post",
        f"{PIPELINE}/resume",
        "Resume every stopped writer (paused or stopped by a failure)",
        TAG,
        ResumedAll,
        params=(NAME,),
        security=ADMIN,
        errors=MUTATING_ERRORS,
    ),
    _writer_op(
        "pause", "Pause a writer: it stops after its confirmed writes, keeps its offset", WriterChanged
    ),
    _writer_op(
        "resume", "Resume a paused or failure-stopped writer (a failed range one at a time)", WriterChanged
    ),
    _writer_op("step", "Write the writer's next entry alone (the writer must be stopped)", WriterStepped),
    _writer_op(
        "offset", "Mark everything up to `offset` acknowledged without writing it", WriterAnswer, MarkOffset
    ),
    *served_by_every_process(TAG),
]


def pipeline_openapi_document() -> dict[str, Any]:
    return openapi_document(
        "hubstream pipeline process",
        "Operator control of the pipelines one `hubstream pipeline run` process runs (like Kafka "
        "Connect's REST API). JSON keys are camelCase; errors are JSON {error, reason}. When "
        "HUBSTREAM_ADMIN_TOKEN is set, POSTs need it as a bearer token, and reads it or "
        "HUBSTREAM_READ_TOKEN.",
        OPERATIONS,
        {},
    )
