"""The OpenAPI 3.0 description of the pipeline process's HTTP API (`hubstream pipeline run`, on
WEB_HOST:PIPELINE_WEB_PORT, GET /openapi.json there). tests/integration/pipeline/test_http_api.py
checks it against that process's route table."""

from __future__ import annotations

from typing import Any

from app.web.openapi import (
    ADMIN,
    ANY_OBJECT,
    BOOL,
    INT,
    MUTATING_ERRORS,
    NULLABLE_STR,
    OPEN,
    STR,
    Schema,
    arr,
    obj,
    op,
    path_param,
    query_param,
)

__all__ = ["pipeline_openapi_document"]

TAG = "pipelines"
PHASE: Schema = {"type": "string", "enum": ["running", "paused", "failed", "stopped", "starting"]}
NULLABLE_INT: Schema = {"type": "integer", "nullable": True}
FAILED: Schema = {
    **obj({"first": INT, "last": INT, "error": STR, "failed_offset": NULLABLE_INT}),
    "nullable": True,
}
NAMESPACE_OFFSETS: Schema = {"type": "object", "additionalProperties": INT}
WRITER_STATE = obj({"offset": INT, "failed": FAILED, "namespaces": NAMESPACE_OFFSETS})
WRITER_VIEW = obj(
    {
        "state": PHASE,
        "offset": INT,
        "lag": INT,
        "stopped": BOOL,
        "last_error": NULLABLE_STR,
        "failed": FAILED,
        "namespaces": NAMESPACE_OFFSETS,
        "received": INT,
    }
)
READER = obj(
    {
        "mode": {"type": "string", "enum": ["copy", "sync", "complete"]},
        "position": ANY_OBJECT,
        "log_offset": INT,
    }
)
WRITER_ANSWER = obj(
    {"pipeline": STR, "writer": STR, **WRITER_VIEW["properties"]},
    {"changed": BOOL, "stepped": NULLABLE_INT, "ok": BOOL},
)
ENTRY = obj(
    {
        "offset": INT,
        "timestamp_ms": INT,
        "mode": STR,
        "key": STR,
        "value": obj({"op": STR, "namespace": STR, "data": ANY_OBJECT}),
        "position": ANY_OBJECT,
    }
)
NAME = path_param("name", description="pipeline name")
WRITER = path_param("writer", description="writer name")
READS = (404, 503)


def _writer_op(summary: str, errors: tuple[int, ...] = MUTATING_ERRORS, **extra: Any) -> dict[str, Any]:
    return {
        "post": op(summary, TAG, WRITER_ANSWER, errors=errors, params=[NAME, WRITER], security=ADMIN, **extra)
    }


def _paths() -> dict[str, Any]:
    base, writer = "/pipelines/{name}", "/pipelines/{name}/writers/{writer}"
    return {
        "/pipelines": {
            "get": op(
                "The pipelines this process runs, with each writer's state",
                TAG,
                obj(
                    {
                        "pipelines": arr(
                            obj(
                                {
                                    "name": STR,
                                    "state": STR,
                                    "writers": arr(obj({"name": STR, "state": PHASE})),
                                }
                            )
                        )
                    }
                ),
                security=OPEN,
            )
        },
        f"{base}/status": {
            "get": op(
                "Reader state per namespace, each writer's state, offset, lag and last error, log end",
                TAG,
                obj(
                    {
                        "pipeline": STR,
                        "state": STR,
                        "commit_log": obj({"topic": STR, "end_offset": INT}),
                        "reader_done": BOOL,
                        "reader_error": NULLABLE_STR,
                        "reader": {"type": "object", "additionalProperties": READER},
                        "writers": {"type": "object", "additionalProperties": WRITER_VIEW},
                    }
                ),
                errors=READS,
                params=[NAME],
                security=OPEN,
            )
        },
        f"{base}/offsets": {
            "get": op(
                "Writer offsets and reader states",
                TAG,
                obj(
                    {
                        "pipeline": STR,
                        "end_offset": INT,
                        "writers": {"type": "object", "additionalProperties": WRITER_STATE},
                        "readers": {"type": "object", "additionalProperties": READER},
                    }
                ),
                errors=READS,
                params=[NAME],
                security=OPEN,
            )
        },
        f"{base}/log": {
            "get": op(
                "Commit-log entries from offset `from` to `to` (inclusive; at most 1,000)",
                TAG,
                obj({"pipeline": STR, "from": INT, "to": INT, "end_offset": INT, "entries": arr(ENTRY)}),
                errors=(400, 401, *READS),
                params=[
                    NAME,
                    query_param("from", {"type": "integer", "minimum": 0}, description="default 0"),
                    query_param("to", {"type": "integer", "minimum": 0}, description="default from + 99"),
                ],
                security=ADMIN,
            )
        },
        f"{base}/pause": {
            "post": op(
                "Pause every running writer",
                TAG,
                obj({"pipeline": STR, "paused": arr(STR)}),
                errors=MUTATING_ERRORS,
                params=[NAME],
                security=ADMIN,
            )
        },
        f"{base}/resume": {
            "post": op(
                "Resume every stopped writer (paused or stopped by a failure)",
                TAG,
                obj({"pipeline": STR, "resumed": arr(STR)}),
                errors=MUTATING_ERRORS,
                params=[NAME],
                security=ADMIN,
            )
        },
        f"{writer}/pause": _writer_op(
            "Pause a writer: it stops after its confirmed writes, keeps its offset"
        ),
        f"{writer}/resume": _writer_op(
            "Resume a paused or failure-stopped writer (a failed range one at a time)"
        ),
        f"{writer}/step": _writer_op("Write the writer's next entry alone (the writer must be stopped)"),
        f"{writer}/offset": _writer_op(
            "Mark everything up to `offset` acknowledged without writing it",
            (*MUTATING_ERRORS, 413),
            body=obj({"offset": {"type": "integer", "minimum": -1}}),
        ),
    }


def pipeline_openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "hubstream pipeline process",
            "version": "1",
            "description": (
                "Operator control of the pipelines one `hubstream pipeline run` process runs (like Kafka "
                "Connect's REST API). JSON is snake_case; errors are JSON {error, reason}. When "
                "HUBSTREAM_ADMIN_TOKEN is set, POSTs and the commit-log view need it as a bearer token."
            ),
        },
        "paths": {
            **_paths(),
            "/openapi.json": {"get": op("This document", TAG, ANY_OBJECT, security=OPEN)},
            "/": {"get": op("Liveness (Faust's index)", TAG, obj({"status": STR}), security=OPEN)},
        },
        "components": {
            "schemas": {"Error": obj({"error": STR, "reason": STR})},
            "securitySchemes": {
                "adminToken": {"type": "http", "scheme": "bearer", "description": "HUBSTREAM_ADMIN_TOKEN"}
            },
        },
    }
