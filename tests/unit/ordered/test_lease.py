"""Lane leases: the owner view's rules and `LaneOwnership` over the in-memory owner log, with a
clock the tests move (no real waiting)."""

from __future__ import annotations

import asyncio

import pytest

from app.ordered.lease import LaneLost, OwnerRecord, OwnerView, takeover_at
from app.ordered.memory import MemoryOwnerLog
from app.ordered.ownership import LaneOwnership


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_release_of_an_older_claim_changes_nothing() -> None:
    view = OwnerView()
    view.apply(OwnerRecord("claim", "s/0", 0, owner="a", nonce="a1"))
    view.apply(OwnerRecord("claim", "s/0", 1, owner="b", nonce="b1"))
    view.apply(OwnerRecord("release", "s/0", 2, epoch=0))  # a's late release
    latest = view.claims["s/0"]
    assert (latest.epoch, latest.owner, latest.released) == (1, "b", False)
    previous = view.previous["s/0"]
    assert previous is not None and previous.released  # b need not wait for a any more


def test_takeover_waits_only_for_an_unreleased_claim() -> None:
    view = OwnerView()
    assert takeover_at(None, 5.0, 10.0) == 5.0
    view.apply(OwnerRecord("claim", "s/0", 0, owner="a", nonce="a1"))
    assert takeover_at(view.claims["s/0"], 5.0, 10.0) == 15.0
    view.apply(OwnerRecord("release", "s/0", 1, epoch=0))
    assert takeover_at(view.claims["s/0"], 5.0, 10.0) == 5.0


async def _yield(_s: float) -> None:
    await asyncio.sleep(0)  # the test moves the clock; waiting only lets it run


async def _waiting(b: LaneOwnership) -> None:
    """Until `b` wrote its claim of s/0 and started its takeover wait (threads may start slowly)."""
    for _ in range(5000):
        await asyncio.sleep(0.001)
        if "s/0" in b.leases:
            return
    raise AssertionError("b never started its takeover wait")


def _two_owners() -> tuple[MemoryOwnerLog, Clock, LaneOwnership, LaneOwnership]:
    """One owner log, one clock the test moves, and two processes' ownerships of lanes in it."""
    shared = MemoryOwnerLog()
    clock = Clock()
    a = LaneOwnership(shared, "a", 10.0, clock, _yield)
    b = LaneOwnership(shared.reader(), "b", 10.0, clock, _yield)
    return shared, clock, a, b


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_fresh_lane_is_owned_at_once_and_a_clean_handover_costs_no_wait() -> None:
    _shared, clock, a, b = _two_owners()

    async def scenario() -> None:
        lease_a = await a.acquire("s/0")
        assert lease_a.may_act(clock.now)
        await a.release(lease_a)
        lease_b = await asyncio.wait_for(b.acquire("s/0"), 1.0)
        assert lease_b.may_act(clock.now) and lease_b.epoch > lease_a.epoch

    _run(scenario())


def test_a_takeover_from_a_silent_owner_waits_one_lease_and_the_old_lease_ends() -> None:
    shared, clock, a, b = _two_owners()

    async def scenario() -> None:
        lease_a = await a.acquire("s/0")
        claimed = asyncio.create_task(b.acquire("s/0"))
        await _waiting(b)
        assert len(shared.records) == 2 and not claimed.done()
        # a is paused: its last read (at 100) still covers it until 110, so it may act at 109...
        clock.now = 109.0
        assert lease_a.may_act(clock.now)
        with pytest.raises(LaneLost):  # ...and not past its lease, whether or not it reads again
            lease_a.check(110.0)
        clock.now = 111.0
        lease_b = await asyncio.wait_for(claimed, 5.0)
        assert lease_b.may_act(clock.now)
        a.refresh()  # a resumes and reads the log: the later claim ends its lease for good
        assert lease_a.lost
        await a.release(lease_a)
        assert [r.kind for r in shared.records] == ["claim", "claim"]  # a lost lease releases nothing

    _run(scenario())


def test_an_old_owner_that_reads_the_new_claim_stops_even_within_its_lease() -> None:
    shared = MemoryOwnerLog()
    clock = Clock()
    a = LaneOwnership(shared, "a", 10.0, clock, _yield)

    async def scenario() -> None:
        lease_a = await a.acquire("s/0")
        shared.reader().claim("s/0", "b", "b1")
        clock.now += 1
        a.refresh()
        with pytest.raises(LaneLost, match="later claim"):
            lease_a.check(clock.now)

    _run(scenario())


def test_the_old_owners_release_during_the_wait_ends_it() -> None:
    shared, clock, a, b = _two_owners()

    async def scenario() -> None:
        lease_a = await a.acquire("s/0")
        claimed = asyncio.create_task(b.acquire("s/0"))
        await _waiting(b)
        shared.release("s/0", lease_a.epoch)  # a finished stopping and let go
        lease_b = await asyncio.wait_for(claimed, 5.0)  # the clock never moved: no wait
        assert lease_b.may_act(clock.now)

    _run(scenario())


def test_a_successor_waits_out_the_longer_lease_its_predecessor_declared() -> None:
    view = OwnerView()
    view.apply(OwnerRecord("claim", "s/0", 0, owner="a", nonce="a1", lease_s=30.0))
    assert takeover_at(view.claims["s/0"], 5.0, 10.0) == 35.0  # a's lease, not the successor's
    view.apply(OwnerRecord("claim", "s/0", 1, owner="b", nonce="b1", lease_s=2.0))
    assert takeover_at(view.claims["s/0"], 5.0, 10.0) == 15.0  # never below its own


def test_a_fence_outlasts_a_silent_holder_and_leaves_the_lane_released() -> None:
    shared = MemoryOwnerLog()
    clock = Clock()
    holder = LaneOwnership(shared, "worker", 20.0, clock, _yield)
    ops = LaneOwnership(shared.reader(), "ops", 5.0, clock, _yield)

    async def scenario() -> None:
        held = await holder.acquire("s/shard-0")
        free = await holder.acquire("s/shard-1")
        await holder.release(free)
        ops.refresh()
        assert ops.held(lambda lane: lane.startswith("s/")) == ["s/shard-0"]
        fencing = asyncio.create_task(ops.fence(["s/shard-0"]))
        for _ in range(5000):  # until ops started its takeover wait
            await asyncio.sleep(0.001)
            if "s/shard-0" in ops.leases:
                break
        clock.now += 19.0  # past ops' own 5 s, inside the holder's declared 20 s
        for _ in range(50):
            await asyncio.sleep(0.001)
        assert not fencing.done()
        clock.now += 2.0
        await asyncio.wait_for(fencing, 5.0)
        with pytest.raises(LaneLost):  # the holder cannot act again, paused or not
            held.check(clock.now)
        ops.refresh()
        assert ops.held(lambda lane: lane.startswith("s/")) == []  # released: no one waits after it

    _run(scenario())


@pytest.mark.parametrize("declared", ["10", None, True, -1.0, float("nan"), float("inf"), 1e9])
def test_a_claim_declaring_no_usable_lease_counts_as_declaring_none(declared: object) -> None:
    from app.ordered.owner_log import _duration

    assert _duration(declared) == 0.0
    assert _duration(12.5) == 12.5 and _duration(3) == 3.0
