"""Waiting for a condition, with a deadline: the one polling loop the app's waits (and the tests'
`tests/support/waiting.py`) are written on.

Each polls its predicate until it returns a truthy value, which it returns, or until `timeout_s`
has passed: then it returns None, and the caller says what it waited for in its own error.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

__all__ = ["async_poll_until", "poll_until"]

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
