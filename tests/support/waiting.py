"""Waiting in tests for something observable, never for a fixed time.

    wait_until(lambda: out.exists(), 30, "the worker's output file")
    rows = await async_wait_until(lambda: fetch_rows() or None, 5, "rows in the table")
    await async_wait_until(endpoint.is_ready, 30, "the endpoint")   # an async predicate is awaited
    await run_until_idle()   # every task that can run does; no time passes (then: nothing happened)

Each polls its predicate until it returns a truthy value, which it returns; past `timeout_s` it
raises AssertionError naming `what` (and the last exception the predicate raised, when `retry_on`
let it be retried). The poll interval only spaces out the checks of the condition. The loop is
the app's own (`app.waiting`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast, overload

from app.waiting import async_poll_until, poll_until

__all__ = ["POLL_S", "async_wait_until", "run_until_idle", "wait_until"]

T = TypeVar("T")
POLL_S = 0.1


def _timed_out(what: str, timeout_s: float, error: BaseException | None) -> AssertionError:
    detail = f" (last error: {error!r})" if error is not None else ""
    return AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{detail}")


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    poll_s: float = POLL_S,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `predicate` until it returns a truthy value (returned); exceptions of the `retry_on`
    types count as not yet."""
    errors: list[BaseException] = []

    def attempt() -> Any:
        try:
            return predicate()
        except retry_on as exc:
            errors[:] = [exc]
            return None

    value = poll_until(attempt, timeout_s, poll_s)
    if not value:
        raise _timed_out(what, timeout_s, errors[0] if errors else None)
    return cast(T, value)


@overload
async def async_wait_until(
    predicate: Callable[[], Awaitable[T]],
    timeout_s: float,
    what: str,
    poll_s: float = POLL_S,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T: ...


@overload
async def async_wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    poll_s: float = POLL_S,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T: ...


async def async_wait_until(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    poll_s: float = POLL_S,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """`wait_until` on the running loop: the other tasks run between polls; `predicate` may be a
    plain function or a coroutine function."""
    errors: list[BaseException] = []

    async def attempt() -> Any:
        try:
            value = predicate()
            return await value if inspect.isawaitable(value) else value
        except retry_on as exc:
            errors[:] = [exc]
            return None

    value = await async_poll_until(attempt, timeout_s, poll_s)
    if not value:
        raise _timed_out(what, timeout_s, errors[0] if errors else None)
    return value


async def run_until_idle(rounds: int = 200) -> None:
    """Step the running loop `rounds` times without letting time pass: every task that is ready runs
    (and what it wakes, up to that depth), no timer fires. For "nothing happens" checks: whatever
    the code under test would do at once in reaction to the last step has happened after this."""
    for _ in range(rounds):
        await asyncio.sleep(0)
