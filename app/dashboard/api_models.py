"""The dashboard's JSON bodies (GET /api/dashboard, /api/dashboard/local) and its OpenAPI operations."""

from __future__ import annotations

from typing import Any

from app.web.models import SnakeCaseModel
from app.web.openapi import Operation

__all__ = ["OPERATIONS", "Dashboard", "LocalSections", "SectionError"]

Rows = list[dict[str, Any]]


class SectionError(SnakeCaseModel):
    section: str
    reason: str


class LocalSections(SnakeCaseModel):
    """This worker's subscription shards and batches (what peers ask each other)."""

    worker: str
    shards: Rows
    batches: Rows
    errors: list[SectionError]


class Dashboard(SnakeCaseModel):
    """Every section; a global one is null until first read, its failure is in `errors`."""

    composite_topics: Rows | None
    subscriptions: Rows | None
    pipelines: Rows | None
    hub: dict[str, Any] | None
    as_of_ms: dict[str, int]  # section -> when it was read
    batches: Rows
    workers: list[str]
    worker: str
    errors: list[SectionError]
    generated_at_ms: int
    took_ms: float


TAG = "operations"
OPERATIONS = [
    Operation(
        "get",
        "/dashboard/",
        "The dashboard page (polls /api/dashboard)",
        TAG,
        ("text/html", {"type": "string"}),
    ),
    Operation("get", "/api/dashboard", "Everything the dashboard shows", TAG, Dashboard),
    Operation(
        "get", "/api/dashboard/local", "This worker's subscription shards and batches", TAG, LocalSections
    ),
]
