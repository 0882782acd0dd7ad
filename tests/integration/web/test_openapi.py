"""/openapi.json describes every route the worker serves, and nothing it does not serve."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import cast

import pytest
from faust.web.drivers.aiohttp import Web as AiohttpWeb

from agents import build_worker
from agents.openapi import worker_openapi_document
from app.settings import Settings


@pytest.mark.integration
def test_document_matches_the_worker_route_table(stack: Settings, tmp_path: Path) -> None:
    unique = uuid.uuid4().hex[:10]
    # Its own ack and completion topics: creating the app creates them with its partition count,
    # and a shared default name made with 1 partition stops every later worker that needs 8.
    settings = stack.model_copy(
        update={
            "home": tmp_path,
            "app_id": f"openapi-{unique}",
            "web_port": 6598,
            "table_partitions": 1,
            "batch_acks_topic": f"openapi-acks-{unique}",
            "batch_completions_topic": f"openapi-completions-{unique}",
        }
    )
    app = build_worker(settings).app
    app.web.init_server()
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in cast(AiohttpWeb, app.web).web_app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    documented = {
        (method, path) for path, methods in worker_openapi_document()["paths"].items() for method in methods
    }
    assert served == documented
