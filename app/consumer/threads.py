"""A copy's long-lived blocking loops (the Kafka poll loop, the readers of its own topics), each
on a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["in_own_thread"]

T = TypeVar("T")


def in_own_thread(fn: Callable[..., T], *args: Any, name: str) -> asyncio.Future[T]:
    """Run `fn(*args)` on a new daemon thread; the returned future (of the running loop) gets its
    result or exception. Not the loop's default executor: every copy in a process shares it
    (min(32, CPUs + 4) threads: 6 on 2 cores), and loops that last a copy's lifetime there leave
    no thread for the blocking calls a rebalance makes (loading key states, reading retry and DLQ
    copies), which then wait forever. Cancelling the future does not stop the thread: `fn` ends
    when the copy's stop flag tells it to."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled by the caller meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def main() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting task as it is
            outcome: tuple[T | None, BaseException | None] = (None, exc)
        else:
            outcome = (result, None)
        with contextlib.suppress(RuntimeError):  # the loop closed before the thread ended
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=main, name=name, daemon=True).start()
    return future
