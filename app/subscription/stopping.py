"""Confirming that a stopped subscription's shards stopped, from the owner log alone.

An operation that must not race the shards (change-shards, delete, reset-offset, unsideline)
sets the subscription stopped, then calls `wait_stopped`: every lane of the subscription that
is still claimed either gets released by its worker within the patience given (the worker saw
the status and stopped the shard), or is fenced (`LaneOwnership.fence`: claimed here, the
holder's lease waited out on this process's monotonic clock, released). No worker's wall clock
is read and no mark ages out: a worker killed holding a shard and one paused past its session
timeout are fenced alike.

A shard that claims its lane after the status changed reads the status again once its claim
stands (`ShardRunner`'s `still_wanted`), finds it stopped and leaves, so a worker acting on a
registry read from before the change cannot start it behind the fence.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from app.ordered.ownership import LaneOwnership
from app.subscription.owners import lanes_of, shard_owner_log
from app.subscription.registry import SubscriptionRegistry
from app.waiting import poll_until

__all__ = ["FENCE_LEASE_S", "STOP_PATIENCE_S", "wait_stopped"]

log = logging.getLogger(__name__)

# The lease an operation holds while it fences: it only waits and releases, and it waits at least
# the lease each replaced claim declared, so this need not match the workers' SUBSCRIPTION_LEASE_S.
FENCE_LEASE_S = 10.0
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
    owner = f"ops-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    ownership = LaneOwnership(owner_log, owner, FENCE_LEASE_S)
    belongs = lanes_of(name)
    held: list[str] = []
    try:

        def released() -> bool:
            ownership.refresh()
            held[:] = ownership.held(belongs)
            return not held

        if poll_until(released, patience_s, every_s=0.5):
            return []
        log.warning("%s: fencing shard lanes not released within %.0f s: %s", name, patience_s, held)
        asyncio.run(ownership.fence(list(held)))
        return list(held)
    finally:
        ownership.close()
        owner_log.close()
