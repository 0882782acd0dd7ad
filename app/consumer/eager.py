"""Run a handler's coroutine up to its first suspension in the caller's task, and, when it does
suspend, await the rest of it there as if it had been awaited from the start.

Most calls of a cheap handler end without suspending: started this way they cost no lane, queue
or wake-up. The caller must already run inside the task that will await the rest (a worker), so
the handler sees that task as current from its first line (`asyncio.timeout`, cancellation).
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any

__all__ = ["Suspended", "resume", "start"]

Suspended = tuple[Coroutine[Any, Any, Any], Any]  # the coroutine, and what it yielded to its task


def start(awaitable: Awaitable[Any]) -> Suspended | None:
    """Run `awaitable` until it first suspends: None when it returned (its value is dropped), the
    coroutine and what it yielded when it suspended. Raises what the coroutine raises."""
    coro = awaitable if type(awaitable) is types.CoroutineType else _awaited(awaitable)
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return coro, yielded


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable  # a handler returning another awaitable (a future): awaited as usual


@types.coroutine
def resume(suspended: Suspended) -> Generator[Any, Any, Any]:
    """Await the rest of a coroutine `start` left suspended: hands what it yielded to the
    awaiting task, and sends back (or throws in: a cancellation) what the task answers."""
    coro, yielded = suspended
    while True:
        try:
            answer = yield yielded
        except BaseException as exc:  # thrown in by the task (a cancellation): the coroutine's
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                yielded = coro.send(answer)
            except StopIteration as done:
                return done.value
