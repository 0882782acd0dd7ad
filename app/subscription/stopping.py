"""Confirming that a stopped subscription's shards stopped, from the owner log alone.

An operation that must not race the shards (change-shards, delete, reset-offset, unsideline)
sets the subscription stopped, then calls `wait_stopped`: every lane of the subscription still
claimed is released by its worker within the patience given (the worker saw the status and
stopped the shard), or fenced (`app.ordered.fencing`). No worker's wall clock is read and no
mark ages out: a worker killed holding a shard and one paused past its session timeout are
fenced alike.

A shard that claims its lane after the status changed reads the status again once its claim
stands (`ShardRunner`'s `still_wanted`), finds it stopped and leaves, so a worker acting on a
registry read from before the change cannot start it behind the fence.
"""

from __future__ import annotations

from app.ordered.fencing import settle_lanes
from app.subscription.owners import lanes_of, shard_owner_log
from app.subscription.registry import SubscriptionRegistry

__all__ = ["STOP_PATIENCE_S", "wait_stopped"]

# How long a worker gets to stop a shard and release its lane itself (it sees the status within a
# second and commits what it delivered) before the lane is fenced; a fenced shard's last
# uncommitted work is redone by its next owner.
STOP_PATIENCE_S = 15.0


def wait_stopped(registry: SubscriptionRegistry, name: str, patience_s: float = STOP_PATIENCE_S) -> list[str]:
    """Return once no earlier owner of a shard of `name` can act again: the lanes fenced (those
    not released within `patience_s`). Blocking; the subscription must be stopped already."""
    owner_log = shard_owner_log(
        registry.broker, registry.topic, replication_factor=registry.replication_factor
    )
    try:
        return settle_lanes(owner_log, lanes_of(name), who=f"ops-{name}", patience_s=patience_s)
    finally:
        owner_log.close()
