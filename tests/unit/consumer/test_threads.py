"""A copy's long-lived loops run on threads of their own, not in the loop's default executor."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.consumer.threads import in_own_thread


async def test_loops_on_their_own_threads_leave_the_default_executor_free() -> None:
    """More lifelong loops than the default executor has threads (6 on 2 cores), as several copies
    in one process run: a blocking call through the executor still gets a thread at once."""
    stop = threading.Event()
    loops = [in_own_thread(stop.wait, name=f"loop-{i}") for i in range(40)]
    try:
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 5) == 42
    finally:
        stop.set()
    assert await asyncio.gather(*loops) == [True] * 40


async def test_the_future_gets_the_threads_result_or_its_exception() -> None:
    assert await in_own_thread(sum, [1, 2, 3], name="sum") == 6

    def fail() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await in_own_thread(fail, name="fail")


async def test_a_cancelled_future_leaves_the_thread_to_end_on_its_own() -> None:
    stop = threading.Event()
    ended = threading.Event()

    def loop() -> None:
        stop.wait()
        ended.set()

    future = in_own_thread(loop, name="loop")
    future.cancel()
    stop.set()
    assert await asyncio.to_thread(ended.wait, 5)
    assert future.cancelled()
