"""Answers of a costly read kept for a moment, so that asking often costs no more than asking once
a moment: the subscription lag view builds Kafka clients for each answer, and a client polling it
in a loop (or many at once) must not turn into as many clients on the broker."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["RecentAnswers"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RecentAnswers(Generic[K, V]):
    """Per key, an answer computed at most once per `ttl_s`; askers of a key while it is computed
    share that computation; one computation runs at a time over all keys; at most `max_keys`
    answers are kept (the oldest go first). A failure is not kept: the next ask computes again."""

    def __init__(
        self, ttl_s: float, max_keys: int = 256, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self._clock = clock
        self._kept: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._running: dict[K, asyncio.Future[V]] = {}
        self._one_at_a_time: asyncio.Lock | None = None
        self.computed = 0

    async def get(self, key: K, compute: Callable[[], Awaitable[V]]) -> V:
        kept = self._kept.get(key)
        if kept is not None and self._clock() - kept[0] < self.ttl_s:
            return kept[1]
        running = self._running.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        try:
            if self._one_at_a_time is None:
                self._one_at_a_time = asyncio.Lock()
            async with self._one_at_a_time:
                value = await compute()
                self.computed += 1
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: an ask that nobody shared is no "unretrieved" warning
            raise
        finally:
            del self._running[key]
        self._kept[key] = (self._clock(), value)
        self._kept.move_to_end(key)
        while len(self._kept) > self.max_keys:
            self._kept.popitem(last=False)
        future.set_result(value)
        return value
