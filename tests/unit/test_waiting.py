"""`app.waiting`: the value that ended the wait, or None once the time is up; the pause between
compare-and-swap attempts."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.waiting import async_poll_until, being_cancelled, conflict_pause_s, gather_all, poll_until


def test_the_first_truthy_value_ends_the_wait() -> None:
    calls = itertools.count(1)
    assert poll_until(lambda: [n] if (n := next(calls)) >= 3 else [], 5, every_s=0.001) == [3]


def test_nothing_truthy_in_time_is_none() -> None:
    seen: list[int] = []
    assert poll_until(lambda: seen.append(1), 0.02, every_s=0.005) is None
    assert len(seen) >= 2  # polled more than once, and at least once past the deadline


async def test_an_async_predicate_is_awaited() -> None:
    calls = itertools.count(1)

    async def ready() -> int:
        return n if (n := next(calls)) >= 2 else 0

    assert await async_poll_until(ready, 5, every_s=0.001) == 2
    assert await async_poll_until(lambda: 0, 0.01, every_s=0.002) is None


@given(
    attempt=st.integers(0, 100),
    attempts=st.integers(1, 100),
    max_s=st.floats(0, 10, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_a_conflict_pause_is_none_before_the_first_retry_then_within_a_growing_cap(
    attempt: int, attempts: int, max_s: float, seed: int
) -> None:
    pause = conflict_pause_s(attempt, attempts, max_s, random.Random(seed))
    if attempt <= 1:
        assert pause == 0.0
    else:
        assert 0.0 <= pause <= max_s * min(attempt, attempts) / attempts


def test_conflict_pauses_are_spread_out_so_racing_writers_fall_out_of_step() -> None:
    rng = random.Random(7)
    pauses = [conflict_pause_s(10, 50, 0.05, rng) for _ in range(200)]
    assert len(set(pauses)) == len(pauses)
    assert min(pauses) < 0.002 < 0.008 < max(pauses) <= 0.01


async def test_a_cancelled_inner_wait_is_told_from_the_task_s_own_cancellation() -> None:
    """A shard task that ended cancelled made the reconcile timer awaiting it end cancelled too,
    and Faust dropped the timer for good: no shard of the worker started again."""
    inner = asyncio.get_running_loop().create_future()
    inner.cancel()
    seen: list[bool] = []

    async def awaits_a_cancelled_future() -> str:
        try:
            await inner
        except asyncio.CancelledError:
            seen.append(being_cancelled())
            if being_cancelled():
                raise
        return "carried on"

    assert await asyncio.create_task(awaits_a_cancelled_future()) == "carried on"

    started = asyncio.Event()

    async def cancelled_itself() -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append(being_cancelled())
            raise

    task = asyncio.create_task(cancelled_itself())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [False, True]


async def test_gather_all_raises_only_once_every_sibling_has_ended() -> None:
    """asyncio.gather raised the first failure at once and left the other writes running: a save
    whose placement failed stopped renewing its claim while its other placements still wrote."""
    ended: list[str] = []
    release = asyncio.Event()

    async def fails() -> str:
        raise ValueError("refused")

    async def slow_write() -> str:
        await release.wait()
        ended.append("slow write")
        return "written"

    gathering = asyncio.create_task(gather_all(fails(), slow_write()))
    await asyncio.sleep(0)  # both started; the failure is in
    assert not gathering.done(), "gave up while a sibling was still writing"
    release.set()
    with pytest.raises(ValueError, match="refused"):
        await gathering
    assert ended == ["slow write"]
    assert await gather_all(asyncio.sleep(0, "a"), asyncio.sleep(0, "b")) == ["a", "b"]
