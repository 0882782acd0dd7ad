"""The OpenAPI documents are valid for schemathesis, every operation documents its answers, and
every body key is camelCase."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import schemathesis

from agents.openapi import worker_openapi_document
from app.pipeline.api_models import pipeline_openapi_document


def test_document_loads_and_every_operation_has_responses() -> None:
    document = worker_openapi_document()
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # an Err fails
    assert len(operations) == sum(len(methods) for methods in document["paths"].values())
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            assert "200" in operation["responses"], (method, path)
            assert operation["summary"], (method, path)


def test_mutating_operations_declare_the_admin_token_except_actor_endpoints() -> None:
    for path, methods in worker_openapi_document()["paths"].items():
        for method, operation in methods.items():
            if method in {"post", "put", "patch", "delete"}:
                expected: list[dict[str, list[str]]] = (
                    [{"actorJwt": []}] if path.startswith("/api/dequeue") else [{"adminToken": []}]
                )
                assert operation["security"] == expected, (method, path)
                assert "401" in operation["responses"], (method, path)


CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


@pytest.mark.parametrize("document", [worker_openapi_document(), pipeline_openapi_document()])
def test_every_body_key_is_camel_case_and_every_schema_generated(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    assert set(schemas["Error"]["required"]) == {"error", "reason"}
    for name, schema in schemas.items():
        for key in schema.get("properties", {}):
            assert CAMEL.match(key), f"{name}.{key} is not camelCase"
    refs = re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(document))
    assert refs and set(refs) <= set(schemas)
