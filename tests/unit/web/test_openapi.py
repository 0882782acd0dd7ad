"""The OpenAPI document is valid for schemathesis and every operation documents its answers."""

from __future__ import annotations

import schemathesis

from agents.openapi import worker_openapi_document


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
