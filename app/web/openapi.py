"""The OpenAPI 3.0 description of every HTTP endpoint a hubstream worker serves (GET /openapi.json).

tests/integration/web/test_openapi.py checks it against the worker's route table (nothing served
is undocumented) and tests/reliability/test_http_fuzz.py fuzzes the worker with it (schemathesis).
"""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]

Schema = dict[str, Any]

INT: Schema = {"type": "integer"}
STR: Schema = {"type": "string"}
BOOL: Schema = {"type": "boolean"}
NULLABLE_STR: Schema = {"type": "string", "nullable": True}
ERROR: Schema = {"$ref": "#/components/schemas/Error"}
ANY_OBJECT: Schema = {"type": "object", "additionalProperties": True}


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None, extra: bool = True) -> Schema:
    return {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **(optional or {})},
        "additionalProperties": extra,
    }


def arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def _json(schema: Schema, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    texts = {
        400: "Bad input (the reason says what)",
        401: "Missing or invalid credentials",
        404: "Not found",
        409: "Conflicts with the current state",
        413: "Request body too large",
        503: "Not ready here right now; retry",
    }
    return {str(code): _json(ERROR, texts[code]) for code in codes}


def op(
    summary: str,
    tag: str,
    ok: Schema | dict[str, Any],
    *,
    errors: tuple[int, ...] = (),
    params: list[dict[str, Any]] | None = None,
    body: Schema | None = None,
    body_required: bool = True,
    security: list[dict[str, list[str]]] | None = None,
    raw_ok: bool = False,
) -> dict[str, Any]:
    responses = {"200": ok if raw_ok else _json(ok), **_errors(*errors)}
    operation: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
    if params:
        operation["parameters"] = params
    if body is not None:
        operation["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": body}},
        }
    if security is not None:
        operation["security"] = security
    return operation


def path_param(name: str, schema: Schema | None = None, description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema or STR, "description": description}


def query_param(name: str, schema: Schema, required: bool = False, description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


ADMIN: list[dict[str, list[str]]] = [{"adminToken": []}]  # enforced only when HUBSTREAM_ADMIN_TOKEN is set
ACTOR: list[dict[str, list[str]]] = [{"actorJwt": []}]
OPEN: list[dict[str, list[str]]] = []
MUTATING_ERRORS = (400, 401, 404, 409, 503)

EXACT_BATCH = obj(
    {"batchId": INT, "isComplete": BOOL, "isClosed": BOOL, "userKey": NULLABLE_STR},
    {"pendingItems": INT, "totalItems": INT},
)
ESTIMATED_BATCH = obj(
    {"batchId": STR, "isComplete": BOOL, "isClosed": BOOL, "userKey": NULLABLE_STR}, {"pending": INT}
)
IS_COMPLETE = obj({"isComplete": BOOL})
REMOVAL = obj({"batchesRemoved": INT, "itemsRemoved": INT})
BATCH_ID_INT = path_param("batchId", {"type": "string", "pattern": "^[0-9]+$"}, "exact batch id")
BATCH_ID_UUID = path_param("batchId", {"type": "string", "format": "uuid"}, "estimated batch id")
SINCE = query_param("since", {"type": "string", "format": "date-time"}, True, "ISO 8601 time")


def _batch_paths() -> dict[str, Any]:
    base, est = "/api/v1/batch/exact", "/api/v1/batch/estimated"
    tag = "batches"
    return {
        "/api/v1/batch/status": {
            "get": op(
                "Batch-table partitions this worker serves and who serves the others",
                tag,
                obj({"partitionsServed": arr(INT), "partitions": INT, "owners": {"type": "object"}}),
                security=OPEN,
            )
        },
        base: {
            "post": op(
                "Open an exact batch",
                tag,
                obj({"batchId": INT}),
                errors=MUTATING_ERRORS,
                body=obj({}, {"userKey": NULLABLE_STR}),
                body_required=False,
                security=ADMIN,
            )
        },
        f"{base}/items": {
            "post": op(
                "Add items to an open exact batch; returns item groups (item ids batchId:group:index)",
                tag,
                obj({"batchItemGroupIds": arr(obj({"id": STR, "upto": INT}))}),
                errors=MUTATING_ERRORS,
                body=obj({"batchId": {"oneOf": [INT, STR]}, "items": INT}),
                security=ADMIN,
            )
        },
        f"{base}/items/ack": {
            "post": op(
                "Acknowledge items; returns the batches this completed",
                tag,
                obj({"batchCompletions": arr(obj({"batchId": INT, "userKey": NULLABLE_STR}))}),
                errors=MUTATING_ERRORS,
                body=obj({"batchItemIds": arr(STR)}),
                security=ADMIN,
            )
        },
        f"{base}/open": {
            "delete": op(
                "Delete open batches not updated since a time",
                tag,
                REMOVAL,
                errors=MUTATING_ERRORS,
                params=[SINCE],
                security=ADMIN,
            )
        },
        f"{base}/closed": {
            "delete": op(
                "Delete closed batches not updated since a time",
                tag,
                REMOVAL,
                errors=MUTATING_ERRORS,
                params=[SINCE],
                security=ADMIN,
            )
        },
        f"{base}/close/{{batchId}}": {
            "post": op(
                "Close an exact batch",
                tag,
                IS_COMPLETE,
                errors=MUTATING_ERRORS,
                params=[BATCH_ID_INT],
                security=ADMIN,
            )
        },
        f"{base}/{{batchId}}": {
            "get": op(
                "An exact batch",
                tag,
                EXACT_BATCH,
                errors=(400, 404, 503),
                params=[BATCH_ID_INT],
                security=OPEN,
            ),
            "delete": op(
                "Close an exact batch (Carlyle's DELETE)",
                tag,
                IS_COMPLETE,
                errors=MUTATING_ERRORS,
                params=[BATCH_ID_INT],
                security=ADMIN,
            ),
        },
        est: {
            "post": op(
                "Open an estimated batch of batchSize items",
                tag,
                obj({"batchId": STR}),
                errors=MUTATING_ERRORS,
                body=obj({"batchSize": INT}, {"userKey": NULLABLE_STR}),
                security=ADMIN,
            )
        },
        f"{est}/decr": {
            "post": op(
                "Count down estimated batches",
                tag,
                obj({"results": arr(obj({"batchId": STR, "userKey": NULLABLE_STR, "isComplete": BOOL}))}),
                errors=MUTATING_ERRORS,
                body=obj({"acks": arr(obj({"batchId": STR}, {"by": INT}))}),
                security=ADMIN,
            )
        },
        f"{est}/{{batchId}}": {
            "get": op(
                "An estimated batch",
                tag,
                ESTIMATED_BATCH,
                errors=(400, 404, 503),
                params=[BATCH_ID_UUID],
                security=OPEN,
            ),
            "delete": op(
                "Delete an estimated batch",
                tag,
                obj({"batchId": STR, "deleted": BOOL}),
                errors=MUTATING_ERRORS,
                params=[BATCH_ID_UUID],
                security=ADMIN,
            ),
        },
        f"{est}/{{batchId}}/incr": {
            "post": op(
                "Count up an estimated batch",
                tag,
                ESTIMATED_BATCH,
                errors=MUTATING_ERRORS,
                params=[BATCH_ID_UUID, query_param("by", INT, description="default 1")],
                security=ADMIN,
            )
        },
        f"{est}/{{batchId}}/close": {
            "post": op(
                "Close an estimated batch",
                tag,
                IS_COMPLETE,
                errors=MUTATING_ERRORS,
                params=[BATCH_ID_UUID],
                security=ADMIN,
            )
        },
    }


BUNDLE = obj(
    {
        "bundleId": STR,
        "domain": STR,
        "messageType": STR,
        "weight": INT,
        "count": INT,
        "events": arr(
            obj(
                {
                    "id": STR,
                    "recipient": STR,
                    "origin": STR,
                    "message_type": STR,
                    "weight": INT,
                    "bundleable": BOOL,
                    "sequence": INT,
                },
                {"batch_item_id": STR},
            )
        ),
    }
)
BUNDLE_ID = query_param("bundleId", {"type": "string", "format": "uuid"}, description="bundle GUID")
NOTHING = {"204": {"description": "Nothing to peek"}}


def _hub_paths() -> dict[str, Any]:
    peek = op(
        "Peek the actor's next bundle (the same one again until dequeued)",
        "message hub",
        BUNDLE,
        errors=(400, 401, 503),
        params=[BUNDLE_ID],
        security=ACTOR,
    )
    peek["responses"].update(NOTHING)
    peek_domain = {
        **peek,
        "summary": "Peek the actor's next bundle of one domain",
        "parameters": [
            path_param("domain", {"type": "string", "enum": ["aggregations", "masterdata", "timeseries"]}),
            BUNDLE_ID,
        ],
    }
    dequeue = op(
        "Acknowledge (dequeue) a peeked bundle",
        "message hub",
        obj({"bundleId": STR, "dequeued": BOOL}),
        errors=(400, 401, 404, 409, 503),
        params=[{**BUNDLE_ID, "required": True}],
        security=ACTOR,
    )
    return {
        "/api/peek": {"get": peek},
        "/api/peek/{domain}": {"get": peek_domain},
        "/api/dequeue": {"delete": dequeue},
    }


def _subscription_paths() -> dict[str, Any]:
    tag = "subscriptions"
    name = path_param("name", description="subscription name")
    return {
        "/subscriptions/shards": {
            "get": op(
                "Shards running on this worker: counters and blocked groups",
                tag,
                obj({"owned_slots": arr(INT), "shards": arr(ANY_OBJECT)}),
                security=OPEN,
            )
        },
        "/subscriptions/{name}/lag": {
            "get": op(
                "Lag per shard of MQ and RQ, and DLQ depth",
                tag,
                obj(
                    {
                        "subscription": STR,
                        "status": STR,
                        "shard_count": INT,
                        "dlq_depth": INT,
                        "shards": arr(obj({"shard": INT, "mq_lag": INT, "rq_lag": INT})),
                    }
                ),
                errors=(400, 404, 503),
                params=[name],
                security=OPEN,
            )
        },
        "/subscriptions/{name}/blocked": {
            "get": op(
                "Groups blocked behind a dead-lettered message, on this worker's shards",
                tag,
                obj({"subscription": STR, "shards_here": arr(INT), "blocked_groups": arr(STR)}),
                errors=(400, 404, 503),
                params=[name],
                security=OPEN,
            )
        },
        "/subscriptions/{name}/groups/{group_id}": {
            "get": op(
                "A group's state (RQ/DLQ positions) on the shard that owns it here",
                tag,
                obj(
                    {"subscription": STR, "group_id": STR, "owned_here": BOOL}, {"state": {"nullable": True}}
                ),
                errors=(400, 404, 503),
                params=[name, path_param("group_id")],
                security=OPEN,
            )
        },
    }


DASHBOARD = obj(
    {
        "composite_topics": {"type": "array", "nullable": True, "items": ANY_OBJECT},
        "subscriptions": {"type": "array", "nullable": True, "items": ANY_OBJECT},
        "pipelines": {"type": "array", "nullable": True, "items": ANY_OBJECT},
        "hub": {"type": "object", "nullable": True},
        "batches": arr(ANY_OBJECT),
        "workers": arr(STR),
        "errors": arr(obj({"section": STR, "reason": STR})),
        "generated_at_ms": INT,
    }
)


def _web_paths() -> dict[str, Any]:
    tag = "operations"
    text = {"description": "OK", "content": {"text/plain": {"schema": STR}}}
    html = {"description": "OK", "content": {"text/html": {"schema": STR}}}
    return {
        "/dashboard/": {
            "get": op("The dashboard page (polls /api/dashboard)", tag, html, raw_ok=True, security=OPEN)
        },
        "/api/dashboard": {"get": op("Everything the dashboard shows", tag, DASHBOARD, security=OPEN)},
        "/api/dashboard/local": {
            "get": op(
                "This worker's subscription shards and batches",
                tag,
                obj(
                    {
                        "worker": STR,
                        "shards": arr(ANY_OBJECT),
                        "batches": arr(ANY_OBJECT),
                        "errors": arr(ANY_OBJECT),
                    }
                ),
                security=OPEN,
            )
        },
        "/metrics": {
            "get": op("Prometheus metrics (text format 0.0.4)", tag, text, raw_ok=True, security=OPEN)
        },
        "/openapi.json": {"get": op("This document", tag, ANY_OBJECT, security=OPEN)},
        "/": {"get": op("Liveness (Faust's index)", tag, obj({"status": STR}), security=OPEN)},
    }


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "hubstream worker",
            "version": "1",
            "description": (
                "Every endpoint a hubstream worker serves. Errors are JSON {error, reason}. When "
                "HUBSTREAM_ADMIN_TOKEN is set, POST/PUT/PATCH/DELETE need it as a bearer token, except "
                "the actor endpoints, which always need an actor JWT (HS256, sub = actor id)."
            ),
        },
        "paths": {**_batch_paths(), **_hub_paths(), **_subscription_paths(), **_web_paths()},
        "components": {
            "schemas": {"Error": obj({"error": STR, "reason": STR})},
            "securitySchemes": {
                "adminToken": {"type": "http", "scheme": "bearer", "description": "HUBSTREAM_ADMIN_TOKEN"},
                "actorJwt": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
        },
    }
