"""Making sure no earlier owner of some lanes acts again, for an operation that must not race
them (a stopped subscription's change-shards or reset, a stopped consumer's dead-letter replay).

Each lane still claimed is either released by its owner within the patience given, or fenced
(`LaneOwnership.fence`): claimed by the operation, the replaced claim's declared lease waited out
on this process's monotonic clock, released. An owner killed holding a lane and one paused past
its session timeout are fenced alike; no wall clock of another host is read."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import uuid
from collections.abc import Callable

from app.ordered.ownership import LaneOwnership
from app.ordered.ports import OwnerLog
from app.waiting import poll_until

__all__ = ["FENCE_LEASE_S", "settle_lanes"]

log = logging.getLogger(__name__)

# The lease an operation holds while it fences: it only waits and releases, and it waits at least
# the lease each replaced claim declared, so this need not match the owners' setting.
FENCE_LEASE_S = 10.0


def settle_lanes(
    owner_log: OwnerLog,
    belongs: Callable[[str], bool],
    *,
    who: str,
    patience_s: float,
    lease_s: float = FENCE_LEASE_S,
) -> list[str]:
    """Return once no earlier owner of a lane `belongs` accepts can act again; the lanes fenced
    (those not released within `patience_s`). Blocking; callable from any thread."""
    owner = f"{who}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    ownership = LaneOwnership(owner_log, owner, lease_s)
    held: list[str] = []
    try:

        def released() -> bool:
            ownership.refresh()
            held[:] = ownership.held(belongs)
            return not held

        if poll_until(released, patience_s, every_s=0.5):
            return []
        log.warning("%s: fencing lanes not released within %.0f s: %s", who, patience_s, held)
        # a loop of its own, in a thread of its own: the caller may be on a running loop's thread
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fence") as pool:
            pool.submit(asyncio.run, ownership.fence(list(held))).result()
        return list(held)
    finally:
        ownership.close()
