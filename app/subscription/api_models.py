"""The subscription views' bodies and their OpenAPI operations."""

from __future__ import annotations

from app.web.models import ApiModel, omitted_when_none
from app.web.openapi import Operation, path_param

__all__ = [
    "OPERATIONS",
    "BlockedGroups",
    "GroupStateAnswer",
    "GroupStateView",
    "QueuePositions",
    "ShardLag",
    "ShardStatus",
    "Shards",
    "SubscriptionLag",
]

Position = list[int]  # [main storage index, main offset, internal storage index, internal offset]


class ShardStatus(ApiModel):
    """A subscription shard running on this worker: its counters and blocked groups."""

    subscription: str
    shard: int
    epoch: int
    lease_epoch: int | None = None  # the lane claim it acts under (None: not claimed yet)
    running: bool
    delivered: int
    sidelined: int
    dead_lettered: int
    skipped: int
    failures: int
    mq_storage_idx: int
    rq_storage_idx: int
    rq_buffered: int
    mq_held_at: int | None
    adopted: int
    forgotten: int = 0  # absent from a peer of an earlier version
    late_records: int = 0  # landed in storage topics the shard had left: not delivered
    missed_on_recovery: int
    blocked_groups: list[str]


class Shards(ApiModel):
    owned_slots: list[int]
    shards: list[ShardStatus]


class ShardLag(ApiModel):
    shard: int
    mq_lag: int
    rq_lag: int


class SubscriptionLag(ApiModel):
    subscription: str
    status: str
    shard_count: int
    dlq_depth: int
    shards: list[ShardLag]


class BlockedGroups(ApiModel):
    subscription: str
    shards_here: list[int]
    blocked_groups: list[str]


class QueuePositions(ApiModel):
    """p: the group's latest message written to the queue; c: the latest one consumed."""

    p: Position | None
    c: Position | None


class GroupStateView(ApiModel):
    rq: QueuePositions
    dlq: QueuePositions
    retry_head: list[int] | None
    retry_head_at: list[int] | None
    handled: list[int] | None
    generation: int
    rq_max_main: list[int] | None
    rq_late: list[Position | None]
    # DLQ ranges [after, upto] given up by a DLQ fast-forward (after null: from the first one)
    dlq_discarded: list[list[list[int] | None]] = []


class GroupStateAnswer(ApiModel):
    subscription: str
    group_id: str
    owned_here: bool
    state: GroupStateView | None
    shard: int | None = omitted_when_none()  # these three only when a shard here owns the group
    blocked: bool | None = omitted_when_none()
    pending_in_rq: bool | None = omitted_when_none()


TAG = "subscriptions"
NAME = path_param("name", description="subscription name")
READ_ERRORS = (400, 404, 503)

OPERATIONS = [
    Operation(
        "get",
        "/subscriptions/shards",
        "Shards running on this worker: counters and blocked groups",
        TAG,
        Shards,
    ),
    Operation(
        "get",
        "/subscriptions/{name}/lag",
        "Lag per shard of MQ and RQ, and DLQ depth (parked dead letters)",
        TAG,
        SubscriptionLag,
        params=(NAME,),
        errors=READ_ERRORS,
    ),
    Operation(
        "get",
        "/subscriptions/{name}/blocked",
        "Groups blocked behind a dead-lettered message, on this worker's shards",
        TAG,
        BlockedGroups,
        params=(NAME,),
        errors=READ_ERRORS,
    ),
    Operation(
        "get",
        "/subscriptions/{name}/groups/{group_id}",
        "A group's state (RQ/DLQ positions) on the shard that owns it here",
        TAG,
        GroupStateAnswer,
        params=(NAME, path_param("group_id")),
        errors=READ_ERRORS,
    ),
]
