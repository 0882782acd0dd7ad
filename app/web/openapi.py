"""OpenAPI 3.1 documents generated from the body models each capability declares.

Each capability lists its routes as `Operation`s next to its models; a process's document is
`openapi_document(...)` over all the operations it serves, with `components/schemas` generated from
the models (JSON Schema 2020-12, as OpenAPI 3.1 takes it). Every error answer is the `Error` model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, models_json_schema
from pydantic_core import CoreSchema

from app.web.models import Error, Liveness
from app.web.security import OPEN_READS

__all__ = [
    "ACTOR",
    "ADMIN",
    "ANY_OBJECT",
    "ERROR_TEXTS",
    "MUTATING_ERRORS",
    "OPEN",
    "Method",
    "Operation",
    "Schema",
    "openapi_document",
    "path_param",
    "query_param",
    "served_by_every_process",
]

Schema = dict[str, Any]
Method = Literal["get", "post", "put", "patch", "delete"]
REF = "#/components/schemas/{model}"
ANY_OBJECT: Schema = {"type": "object", "additionalProperties": True}
ADMIN = ("adminToken",)  # enforced only when HUBSTREAM_ADMIN_TOKEN is set
READ = ("adminToken", "readToken")  # likewise: either token
ACTOR = ("actorJwt",)
OPEN: tuple[str, ...] = ()
TOKEN_SCHEMES: Mapping[str, Schema] = {
    "adminToken": {"type": "http", "scheme": "bearer", "description": "HUBSTREAM_ADMIN_TOKEN"},
    "readToken": {"type": "http", "scheme": "bearer", "description": "HUBSTREAM_READ_TOKEN (reads only)"},
}
MUTATING_ERRORS = (400, 401, 404, 409, 503)
ERROR_TEXTS = {
    400: "Bad input (the reason says what)",
    401: "Missing or invalid credentials",
    403: "The Host or Origin is not this worker's (app.web.browser_guard)",
    404: "Not found",
    409: "Conflicts with the current state",
    413: "Request body too large",
    415: "A POST with neither a JSON Content-Type nor an Authorization header",
    503: "Not ready here right now; retry",
}


@dataclass(frozen=True)
class Operation:
    """One route's method: its answer (a model, or a media type and schema), its request body model,
    parameters, security scheme names (() = open) and documented error statuses."""

    method: Method
    path: str
    summary: str
    tag: str
    response: type[BaseModel] | tuple[str, Schema]
    request: type[BaseModel] | None = None
    request_required: bool = True
    params: tuple[Schema, ...] = ()
    security: tuple[str, ...] = OPEN
    errors: tuple[int, ...] = ()
    bodiless: Mapping[int, str] = field(default_factory=dict)  # e.g. {204: "Nothing to peek"}


class _Schemas(GenerateJsonSchema):
    """Pydantic's JSON Schema without a title on every property (the property's name says it)."""

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:
        return False


def path_param(name: str, schema: Schema | None = None, description: str = "") -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": schema or {"type": "string"},
        "description": description,
    }


def query_param(name: str, schema: Schema, required: bool = False, description: str = "") -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def _json(schema: Schema, description: str = "OK", media: str = "application/json") -> Schema:
    return {"description": description, "content": {media: {"schema": schema}}}


def _operation(op: Operation, refs: Mapping[tuple[Any, JsonSchemaMode], Schema]) -> Schema:
    if isinstance(op.response, tuple):
        ok = _json(op.response[1], media=op.response[0])
    else:
        ok = _json(refs[(op.response, "serialization")])
    responses: Schema = {"200": ok}
    responses.update({str(code): {"description": text} for code, text in op.bodiless.items()})
    error = refs[(Error, "serialization")]
    # Every route may refuse a foreign Host or Origin; a POST, a cross-site form's type. A read
    # outside OPEN_READS needs a token once HUBSTREAM_ADMIN_TOKEN is set (app.web.security).
    guarded_read = op.method == "get" and not op.security and op.path not in OPEN_READS
    security = READ if guarded_read else op.security
    codes = {*op.errors, 403, *((415,) if op.method == "post" else ()), *((401,) if guarded_read else ())}
    responses.update({str(code): _json(error, ERROR_TEXTS[code]) for code in sorted(codes)})
    operation: Schema = {
        "summary": op.summary,
        "tags": [op.tag],
        "responses": responses,
        "security": [{name: []} for name in security],  # alternatives: any one of them
    }
    if op.params:
        operation["parameters"] = list(op.params)
    if op.request is not None:
        operation["requestBody"] = {
            "required": op.request_required,
            "content": {"application/json": {"schema": refs[(op.request, "validation")]}},
        }
    return operation


def openapi_document(
    title: str, description: str, operations: Iterable[Operation], security_schemes: Mapping[str, Schema]
) -> dict[str, Any]:
    ops = list(operations)
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(Error, "serialization")]
    for op in ops:
        if not isinstance(op.response, tuple):
            wanted.append((op.response, "serialization"))
        if op.request is not None:
            wanted.append((op.request, "validation"))
    refs, schemas = models_json_schema(
        list(dict.fromkeys(wanted)), ref_template=REF, schema_generator=_Schemas
    )
    paths: dict[str, Schema] = {}
    for op in ops:
        paths.setdefault(op.path, {})[op.method] = _operation(op, refs)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1", "description": description},
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {**TOKEN_SCHEMES, **security_schemes},
        },
    }


def served_by_every_process(tag: str) -> list[Operation]:
    """The document itself, Prometheus' metrics and Faust's liveness index."""
    return [
        Operation("get", "/openapi.json", "This document", tag, ("application/json", ANY_OBJECT)),
        Operation(
            "get",
            "/metrics",
            "Prometheus metrics (text format 0.0.4)",
            tag,
            ("text/plain", {"type": "string"}),
        ),
        Operation("get", "/", "Liveness (Faust's index)", tag, Liveness),
    ]
