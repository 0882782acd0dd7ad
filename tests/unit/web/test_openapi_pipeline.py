"""The pipeline process's OpenAPI document is valid for schemathesis, answers are documented, and
every change (and the commit-log view) declares the admin token."""

from __future__ import annotations

import schemathesis

from app.pipeline.api_models import pipeline_openapi_document
from app.web.security import OPEN_READS


def test_document_loads_and_every_operation_has_responses() -> None:
    document = pipeline_openapi_document()
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # an Err fails
    assert len(operations) == sum(len(methods) for methods in document["paths"].values()) == 13
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            assert "200" in operation["responses"] and operation["summary"], (method, path)


def test_changes_and_the_log_view_declare_the_admin_token_and_reads_either_token() -> None:
    for path, methods in pipeline_openapi_document()["paths"].items():
        for method, operation in methods.items():
            admin = method == "post" or path.endswith("/log")
            expected: list[dict[str, list[str]]] = (
                [{"adminToken": []}] if admin else [{"adminToken": []}, {"readToken": []}]
            )
            if path in OPEN_READS:
                expected = []  # open: no token whatever the settings
            assert operation["security"] == expected, (method, path)
            assert ("401" in operation["responses"]) == bool(expected), (method, path)
