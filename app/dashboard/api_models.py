"""The dashboard's JSON bodies (GET /api/dashboard, /api/dashboard/local) and its OpenAPI operations.

The sections are built as snake_case dicts (app/dashboard/sources.py, dashboard.py; /metrics reads
them too) and go on the wire through these models, camelCase like every answer.
"""

from __future__ import annotations

from pydantic import Field, field_serializer
from pydantic.alias_generators import to_camel

from app.pipeline.api_models import ReaderView
from app.subscription.api_models import ShardStatus
from app.web.models import ApiModel, omitted_when_none
from app.web.openapi import Operation

__all__ = [
    "OPERATIONS",
    "BatchRow",
    "CompositeTopicRow",
    "Dashboard",
    "HubActorRow",
    "HubSection",
    "LocalSections",
    "PipelineRow",
    "PipelineWriterRow",
    "SectionError",
    "StorageTopicRow",
    "SubscriptionRow",
    "SubscriptionShardRow",
    "WorkerShard",
]


class SectionError(ApiModel):
    section: str  # a section's key as the answer names it (compositeTopics, ...), or "peer"
    reason: str

    @field_serializer("section")
    def _camel(self, section: str) -> str:
        return to_camel(section)


class StorageTopicRow(ApiModel):
    index: int
    name: str
    partitions: int
    k: int
    produce: bool  # the storage topic producers write to
    end_offsets: list[int]
    records: int


class CompositeTopicRow(ApiModel):
    name: str
    version: int
    produce_pointer: int
    k: int
    records: int
    storage_topics: list[StorageTopicRow]


class SubscriptionShardRow(ApiModel):
    """A shard's lag, and what the worker running it (if any) counts."""

    shard: int
    mq_lag: int
    rq_lag: int
    worker: str | None = None
    running: bool = False
    delivered: int | None = None
    dead_lettered: int | None = None
    failures: int | None = None
    sidelined: int | None = None
    blocked_groups: list[str] = Field(default_factory=list)


class SubscriptionRow(ApiModel):
    name: str
    topic: str
    status: str
    shard_count: int
    epoch: int
    on_dlq: str
    shards: list[SubscriptionShardRow]
    mq_lag: int
    rq_depth: int
    dlq_depth: int
    blocked_groups: list[str] = Field(default_factory=list)
    error: str | None = omitted_when_none()


class PipelineWriterRow(ApiModel):
    name: str
    next_offset: int
    lag: int
    stopped: bool
    error: str | None


class PipelineRow(ApiModel):
    name: str
    commit_log: str  # the commit log's topic
    end_offset: int
    readers: dict[str, ReaderView]  # by namespace
    writers: list[PipelineWriterRow]
    error: str | None = omitted_when_none()


class HubActorRow(ApiModel):
    actor: str
    depth: int
    by_domain: dict[str, int]


class HubSection(ApiModel):
    actors: list[HubActorRow]  # the most behind first, at most the dashboard's hub_max_actors
    actor_count: int  # actors measured
    total_depth: int  # exact, over every measured actor (app/hub/depths.py)
    truncated: bool  # more actors measured than rows shown
    not_measured: int = 0  # actors an older version wrote, beyond the ones queried
    behind: int = 0  # actors with unacknowledged events


class BatchRow(ApiModel):
    kind: str  # exact or estimated
    batch_id: str
    user_key: str | None
    is_closed: bool
    is_complete: bool
    total_items: int | None  # exact batches only
    acked_items: int | None
    pending_items: int
    updated_at_ms: int
    partition: int
    worker: str | None = None  # the worker serving its partition


class WorkerShard(ShardStatus):
    worker: str


class LocalSections(ApiModel):
    """This worker's subscription shards and batches (what peers ask each other)."""

    worker: str
    shards: list[WorkerShard]
    batches: list[BatchRow]
    errors: list[SectionError]


class Dashboard(ApiModel):
    """Every section; a global one is null until first read, its failure is in `errors`."""

    composite_topics: list[CompositeTopicRow] | None
    subscriptions: list[SubscriptionRow] | None
    pipelines: list[PipelineRow] | None
    hub: HubSection | None
    as_of_ms: dict[str, int]  # section -> when it was read
    batches: list[BatchRow]
    workers: list[str]
    worker: str
    errors: list[SectionError]
    generated_at_ms: int
    took_ms: float

    @field_serializer("as_of_ms")
    def _camel_sections(self, as_of_ms: dict[str, int]) -> dict[str, int]:
        return {to_camel(section): at for section, at in as_of_ms.items()}


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
