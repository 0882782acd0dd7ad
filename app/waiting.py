"""Waiting for a condition, with a deadline: the one polling loop the app's waits (and the tests'
`tests/support/waiting.py`) are written on.

Each polls its predicate until it returns a truthy value, which it returns, or until `timeout_s`
has passed: then it returns None, and the caller says what it waited for in its own error.

`after_conflict` is the pause before a compare-and-swap loop tries again. `being_cancelled` tells
a task's own cancellation from a cancelled wait inside it. `gather_all` awaits writes side by side
and fails only once every one of them has ended.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast, overload

__all__ = [
    "after_conflict",
    "async_poll_until",
    "being_cancelled",
    "conflict_pause_s",
    "gather_all",
    "poll_until",
]

T = TypeVar("T")


def poll_until(predicate: Callable[[], T], timeout_s: float, every_s: float = 0.1) -> T | None:
    """Call `predicate` every `every_s` until it returns a truthy value; None past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(every_s)


@overload
async def async_poll_until(
    predicate: Callable[[], Awaitable[T]], timeout_s: float, every_s: float = 0.1
) -> T | None: ...


@overload
async def async_poll_until(
    predicate: Callable[[], T], timeout_s: float, every_s: float = 0.1
) -> T | None: ...


async def async_poll_until(predicate: Callable[[], object], timeout_s: float, every_s: float = 0.1) -> object:
    """`poll_until` on the running loop (other tasks run between polls); `predicate` may be a
    coroutine function."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(every_s)


def conflict_pause_s(attempt: int, attempts: int, max_s: float, rng: random.Random | None = None) -> float:
    """How long to wait before try `attempt` (0-based) of `attempts` of a compare-and-swap: none
    before the first retry (a stale cached copy, not a race, is the usual cause of one conflict),
    then a random share of a cap that grows to `max_s`, so writers racing for one document stop
    colliding in step."""
    if attempt <= 1 or max_s <= 0 or attempts <= 0:
        return 0.0
    return (rng or random).uniform(0, max_s * min(attempt, attempts) / attempts)


async def after_conflict(attempt: int, attempts: int, max_s: float = 0.05) -> None:
    """Sleep `conflict_pause_s` (nothing before the first retry)."""
    pause = conflict_pause_s(attempt, attempts, max_s)
    if pause:
        await asyncio.sleep(pause)


def being_cancelled() -> bool:
    """Is the running task being cancelled? If not, a CancelledError caught now came from a wait
    inside it that something else cancelled (an inner task, a client's own cancelled future), and
    the task should carry on rather than end as if it had been cancelled."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def gather_all(*aws: Awaitable[T]) -> list[T]:
    """Await every one of `aws` side by side to its end, then raise the first failure (in argument
    order), if any. `asyncio.gather` raises the first failure at once and leaves the others
    running unobserved: a caller that then retried (a save whose claim it stops renewing) raced
    its own earlier writes."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast("list[T]", results)
