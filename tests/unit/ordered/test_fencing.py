"""`settle_lanes` over the in-memory owner log, with short leases (real time, a fraction of a
second): lanes released by their owners need no fence; a lane still held is fenced, its holder
can act no more, and the lane is left released for the next owner."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.ordered.fencing import settle_lanes
from app.ordered.lease import LaneLost, Lease
from app.ordered.memory import MemoryOwnerLog
from app.ordered.ownership import LaneOwnership

LEASE_S = 0.3


def _belongs(lane: str) -> bool:
    return lane.startswith("orders/")


def test_released_lanes_are_settled_at_once_and_held_ones_are_fenced() -> None:
    shared = MemoryOwnerLog()
    holder = LaneOwnership(shared, "worker", LEASE_S)

    async def claim() -> tuple[Lease, Lease]:
        kept = await holder.acquire("orders/shard-0")
        done = await holder.acquire("orders/shard-1")
        await holder.release(done)
        await holder.acquire("other/shard-0")  # another subscription's: not this operation's
        return kept, done

    kept, _done = asyncio.run(claim())
    started = time.monotonic()
    fenced = settle_lanes(shared.reader(), _belongs, who="test", patience_s=0.0, lease_s=LEASE_S)
    assert fenced == ["orders/shard-0"]
    assert time.monotonic() - started >= LEASE_S  # the holder's lease was waited out
    with pytest.raises(LaneLost):
        kept.check(time.monotonic())
    assert settle_lanes(shared.reader(), _belongs, who="test", patience_s=0.0, lease_s=LEASE_S) == []
    holder.close()


def test_a_release_within_the_patience_needs_no_fence() -> None:
    shared = MemoryOwnerLog()
    holder = LaneOwnership(shared, "worker", LEASE_S)
    lease = asyncio.run(holder.acquire("orders/shard-0"))
    shared.release("orders/shard-0", lease.epoch)
    records = len(shared.records)
    assert settle_lanes(shared.reader(), _belongs, who="test", patience_s=1.0, lease_s=LEASE_S) == []
    assert len(shared.records) == records  # nothing claimed
    holder.close()
