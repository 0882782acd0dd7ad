"""A timer round that fails, or ends in a cancelled inner wait, is logged and the timer goes on;
the timer's own cancellation still ends it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.worker.timers import every, surviving


async def test_a_failed_round_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def round_() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("broker did not answer")

    guarded = surviving("watchdog", round_)
    with caplog.at_level(logging.ERROR, logger="app.worker.timers"):
        await guarded()
        await guarded()
    assert calls == 2
    assert "timer watchdog: round failed" in caplog.text


async def test_a_cancelled_inner_wait_does_not_end_the_timer(caplog: pytest.LogCaptureFixture) -> None:
    async def round_() -> None:
        inner: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        inner.cancel()  # a task the round waits for ended cancelled
        await inner

    with caplog.at_level(logging.ERROR, logger="app.worker.timers"):
        await surviving("reconcile", round_)()  # returns: the timer carries on
    assert "a wait inside was cancelled" in caplog.text


async def test_the_timers_own_cancellation_ends_it() -> None:
    started = asyncio.Event()

    async def round_() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(surviving("reaper", round_)())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_every_registers_the_guarded_round_with_faust() -> None:
    registered: list[tuple[float, str, bool, object]] = []

    class App:
        def timer(self, interval: float, name: str, on_leader: bool):  # type: ignore[no-untyped-def]
            def take(fn: object) -> object:
                registered.append((interval, name, on_leader, fn))
                return fn

            return take

    async def round_() -> None:
        raise RuntimeError("x")

    guarded = every(App(), 2.5, "batch-reaper")(round_)
    leader_only = every(App(), 60.0, "hub-reclaim", on_leader=True)(round_)
    assert registered == [(2.5, "batch-reaper", False, guarded), (60.0, "hub-reclaim", True, leader_only)]
    asyncio.run(guarded())  # guarded: does not raise
