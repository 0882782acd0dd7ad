"""Per-group lanes over partitions read in order: each group's records run one at a time, in read
order; groups run side by side; each partition is committable up to its first record not finished
(`OffsetTracker`). A group without failures is never held by another group's slow delivery: the
reader goes on reading while deliveries are in flight, within a bound on what is read and not
finished.

Host-neutral asyncio (no Kafka): the subscription shard runs its per-message deliveries through it.
A failure of `handle` (one that is not an outcome: the shard may no longer act, a queue write was
not confirmed) stops the lanes; the host raises it with `raise_failure` and nothing past the
failed record's offset is ever committable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from app.ordered.progress import KeyLanes, OffsetTracker

__all__ = ["GroupLanes"]

P = TypeVar("P", bound=Hashable)  # a partition as the host names it
K = TypeVar("K", bound=Hashable)  # an ordering key
T = TypeVar("T")  # an item (the host's record of work)


class GroupLanes(Generic[P, K, T]):
    """`handle(item)` runs each item; `read` registers offsets in read order, `submit` hands an
    item to its key's lane (an item may be submitted later than it was read, as RQ copies waiting
    for their time are)."""

    def __init__(self, handle: Callable[[T], Awaitable[None]], max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, not {max_open}")
        self._handle = handle
        self.max_open = max_open
        self._lanes: KeyLanes[K, tuple[P, int, T]] = KeyLanes()
        self._trackers: dict[P, OffsetTracker] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._closing = False
        self._changed = asyncio.Event()  # an item finished or failed
        self.open = 0  # submitted and not finished, over all partitions

    # -- reading ---------------------------------------------------------------------------------
    def read(self, partition: P, offset: int) -> None:
        """The reader took the record at `offset` (offsets of a partition increase)."""
        tracker = self._trackers.get(partition)
        if tracker is None:
            tracker = self._trackers[partition] = OffsetTracker(offset)
        tracker.read(offset)

    def submit(self, partition: P, offset: int, key: K, item: T) -> None:
        """Run `item` (read at `partition`/`offset`) once its key's earlier items are done."""
        entry = (partition, offset, item)
        self.open += 1
        if self._lanes.add(key, entry):
            task = asyncio.create_task(self._run_lane(key, entry))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def take(self, partition: P, offset: int, key: K, item: T) -> None:
        """`read` and `submit` at once."""
        self.read(partition, offset)
        self.submit(partition, offset, key, item)

    @property
    def full(self) -> bool:
        return self.open >= self.max_open

    def busy(self, key: K) -> bool:
        """Whether an item of `key` runs or waits."""
        return key in self._lanes.busy_keys

    # -- progress --------------------------------------------------------------------------------
    def committable(self) -> dict[P, int]:
        """Per partition read: every offset below this is finished."""
        return {p: t.committable for p, t in self._trackers.items()}

    def reset(self) -> None:
        """Forget the partitions' progress (they are assigned anew); only while nothing runs."""
        if self._tasks:
            raise RuntimeError("lanes reset while items run")
        self._trackers.clear()
        self.open = 0

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def wait_change(self, timeout_s: float) -> None:
        """Until an item finishes or fails, or `timeout_s`."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    async def drain(self) -> None:
        """Until every submitted item is done, or one failed: raised at once (what still runs is
        the host's to `cancel`)."""
        while self._tasks:
            self.raise_failure()
            await asyncio.wait(set(self._tasks), return_when=asyncio.FIRST_COMPLETED)
        self.raise_failure()

    async def close(self) -> None:
        """Stop: the running items end, nothing waiting starts; a failure is not raised."""
        self._closing = True
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    async def cancel(self) -> None:
        """Cancel whatever runs (after a failure, or when the host dies)."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    # -- the lanes -------------------------------------------------------------------------------
    async def _run_lane(self, key: K, entry: tuple[P, int, T]) -> None:
        current: tuple[P, int, T] | None = entry
        while current is not None and self._failure is None and not self._closing:
            partition, offset, item = current
            try:
                await self._handle(item)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # not an outcome: the lanes stop, the host raises it
                if self._failure is None:
                    self._failure = exc
                self._changed.set()
                return
            self._trackers[partition].finish(offset)
            self.open -= 1
            self._changed.set()
            current = self._lanes.done(key)
