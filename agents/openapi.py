"""The worker's OpenAPI document (GET /openapi.json): every capability's operations, assembled here,
above all of them. tests/integration/web/test_openapi.py checks it against the worker's route
table; tests/reliability/test_http_fuzz.py fuzzes the worker with it."""

from __future__ import annotations

from typing import Any

from app.batch import api_models as batch
from app.dashboard import api_models as dashboard
from app.hub import api_models as hub
from app.subscription import api_models as subscription
from app.web.openapi import openapi_document, served_by_every_process

__all__ = ["worker_openapi_document"]

DESCRIPTION = (
    "Every endpoint a hubstream worker serves. JSON keys are camelCase; errors are JSON "
    "{error, reason}. When HUBSTREAM_ADMIN_TOKEN is set, POST/PUT/PATCH/DELETE need it as a "
    "bearer token, except the actor endpoints, which always need an actor JWT (HS256, sub = "
    "actor id)."
)


def worker_openapi_document() -> dict[str, Any]:
    return openapi_document(
        "hubstream worker",
        DESCRIPTION,
        [
            *batch.OPERATIONS,
            *hub.OPERATIONS,
            *subscription.OPERATIONS,
            *dashboard.OPERATIONS,
            *served_by_every_process("operations"),
        ],
        {"actorJwt": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
    )
