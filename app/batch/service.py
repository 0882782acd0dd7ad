"""The batch service on one worker: which table partitions it serves, the domain rules applied to
them, where other partitions are served, and completion events.

Every mutating method is synchronous (no await between read and write), so HTTP views, the ack
agent and the reaper, all on the worker's event loop, never interleave inside one batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import orjson

from app.batch.atomic import MAX_INTENT_BYTES, atomically, replay_intent
from app.batch.errors import PartitionNotReady
from app.batch.estimated import EstimatedRules
from app.batch.exact import AckOutcome, ExactRules, Removal, SortedAcks
from app.batch.ids import GroupAcks, ItemGroup, partition_of_estimated, partition_of_exact
from app.batch.model import BatchStore, BatchTable, Completion, EstimatedBatch, ExactBatch
from app.batch.reaper import ReapPolicy
from app.crashpoints import crash_point
from app.errors import ConfigError
from app.settings import Settings
from app.waiting import async_poll_until

__all__ = ["BatchService", "now_ms"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


class BatchService:
    def __init__(self, app: Any, table: BatchTable, settings: Settings) -> None:
        self.app = app
        self.table = table
        self.settings = settings
        self.partitions = settings.table_partitions
        self.exact = ExactRules(settings.batch_group_size_items, settings.batch_max_items_per_add)
        largest = self.exact.largest_add(MAX_INTENT_BYTES)
        if settings.batch_max_items_per_add > largest:
            raise ConfigError(
                f"BATCH_MAX_ITEMS_PER_ADD={settings.batch_max_items_per_add} is more items than one add"
                f" can write at once with BATCH_GROUP_SIZE_ITEMS={settings.batch_group_size_items}:"
                f" at most {largest}"
            )
        self.estimated = EstimatedRules()
        self.reap_policy = ReapPolicy(settings.batch_reap_open_after_s, settings.batch_reap_closed_after_s)
        self.ready: set[int] = set()
        self._round_robin = itertools.count()
        self._stores: dict[int, Any] = {}
        self.completions_topic: Any = None
        self._in_flight: list[Any] = []
        self.revocations = 0  # partitions taken away from this worker so far (rebalances)
        self._publishing: set[tuple[str, str]] = set()  # completions being sent right now

    # -- ownership -------------------------------------------------------------------------------

    def mark_ready(self, partitions: Iterable[int]) -> None:
        self.ready = set(partitions)
        self._stores.clear()

        log.info("batch table partitions served here: %s", sorted(self.ready))

    def mark_unready(self) -> None:
        self.revocations += 1
        self.ready = set()
        self._stores.clear()

    def recovering(self) -> bool:
        """Faust is restoring this worker's table partitions from their changelogs."""
        return bool(getattr(self.app, "in_recovery", False))

    def rebalancing(self) -> bool:
        """A rebalance is under way (from its start until the recovery after it ended): partitions
        may be moving. Faust flushes the producer before this worker lets its partitions go, so a
        write issued before the rebalance is in the changelog before a new owner restores it; one
        issued during it could land after, unseen by the new owner (a zombie write): refused."""
        return bool(getattr(self.app, "rebalancing", False))

    def serving(self, partition: int) -> bool:
        return partition in self.ready and not self.recovering() and not self.rebalancing()

    async def wait_ready(self, partition: int, timeout_s: float, every_s: float = 0.1) -> bool:
        """Whether `partition` is served here within `timeout_s` (recovery may still be running)."""
        return bool(await async_poll_until(lambda: self.serving(partition), timeout_s, every_s))

    def store(self, partition: int) -> Any:
        """The partition's store, or PartitionNotReady when this worker does not serve it now."""
        if not self.serving(partition):
            raise PartitionNotReady(
                f"batch table partition {partition} is not served by this worker right now"
            )
        store = self._stores.get(partition)
        if store is None:
            store = self._stores[partition] = self.table.partition_store(partition, self._in_flight)
        return store

    def run(self, partition: int, operation: Callable[[BatchStore], T]) -> T:
        """Apply `operation` to the partition all or nothing (app.batch.atomic): an exception out
        of it writes nothing; a crash inside the write is finished by the next operation, here or
        on the worker that restores the partition."""
        with self.writing(partition) as store:
            return operation(store)

    @contextlib.contextmanager
    def writing(self, partition: int) -> Iterator[BatchStore]:
        """`run` as a block, for operations spread over several rule calls."""
        with atomically(self.store(partition)) as store:
            yield store

    async def flush(self) -> None:
        """Wait until every table change made so far is in the changelog (acknowledged by Kafka).

        Callers answer an HTTP request, or let Faust commit an ack record's offset, only after this:
        a worker killed right after an answer must not lose what the answer reported.
        """
        if not self._in_flight:
            return
        try:
            await asyncio.gather(*list(self._in_flight))  # in flight now; later writes are not ours
        except Exception as exc:
            self.changelog_lost(exc)
        self._in_flight[:] = [fut for fut in self._in_flight if not fut.done()]

    def changelog_lost(self, exc: BaseException) -> None:
        """A change Kafka refused for good: later changes of its partition may be in the changelog
        without it, and what this worker holds in memory no longer matches. Stop at once, without
        committing any offset; the restarted worker restores from the changelog and the records
        whose changes were not confirmed come again. (Fail-stop, as Kafka Streams does on a fatal
        producer error.)"""
        log.critical("a batch table change did not reach its changelog (%r): stopping this worker", exc)
        logging.shutdown()
        os._exit(70)

    def owner_urls(self) -> dict[int, str]:
        """Partition -> web URL of the worker with the active replica (from Faust's assignor)."""
        topic = self.table.changelog_topic()
        owners: dict[int, str] = {}
        for url, topics in self.app.router.table_metadata(self.table.name).items():
            for partition in topics.get(topic, []):
                owners[partition] = str(url)
        return owners

    def pick_local_partition(self) -> int | None:
        ready = sorted(self.ready)
        return ready[next(self._round_robin) % len(ready)] if ready else None

    def exact_partition(self, batch_id: int) -> int:
        return partition_of_exact(batch_id, self.partitions)

    def estimated_partition(self, batch_id: str) -> int:
        return partition_of_estimated(batch_id, self.partitions)

    # -- exact -----------------------------------------------------------------------------------

    def create_exact(self, partition: int, user_key: str | None) -> ExactBatch:
        return self.run(
            partition, lambda s: self.exact.create(s, partition, self.partitions, user_key, now_ms())
        )

    def get_exact(self, batch_id: int) -> ExactBatch:
        return self.run(self.exact_partition(batch_id), lambda s: self.exact.get(s, batch_id))

    def add_items(self, batch_id: int, items: int, request_id: str | None = None) -> list[ItemGroup]:
        return self.run(
            self.exact_partition(batch_id),
            lambda s: self.exact.add_items(
                s, batch_id, items, now_ms(), lambda: str(uuid.uuid4()), request_id
            ),
        )

    def close_exact(self, batch_id: int) -> tuple[ExactBatch, Completion | None]:
        return self.run(self.exact_partition(batch_id), lambda s: self.exact.close(s, batch_id, now_ms()))

    def split_by_partition(self, acks: Sequence[GroupAcks]) -> dict[int, list[GroupAcks]]:
        by_partition: dict[int, list[GroupAcks]] = defaultdict(list)
        for ack in acks:
            by_partition[self.exact_partition(ack.batch_id)].append(ack)
        return dict(by_partition)

    def sort_acks(self, partition: int, acks: Sequence[GroupAcks]) -> SortedAcks:
        """`acks` (of batches of `partition`) by whether they can apply (`ExactRules.sort`)."""
        return self.run(partition, lambda s: self.exact.sort(s, partition, self.partitions, acks))

    def ack(self, partition: int, acks: Sequence[GroupAcks]) -> AckOutcome:
        """Clear the acked bits, as many item groups per operation as one intent record holds. Every
        id is checked first (a bad one changes nothing). Each part is whole on its own (its groups'
        bits and the header's count together), so a crash between parts leaves a part-applied ack
        that its redelivery finishes: bits already cleared are not counted again."""
        batches, _ = self.run(partition, lambda s: self.exact.check(s, acks))
        sizes = {batch_id: len(batch.encode()) for batch_id, batch in batches.items()}
        cleared, completions = 0, {}
        for part in self.exact.ack_parts(acks, MAX_INTENT_BYTES, sizes):
            done = self.run(partition, partial(self.exact.ack, acks=part, now_ms=now_ms()))
            cleared += done.items_cleared
            completions.update({c.batch_id: c for c in done.completions})
        return AckOutcome(cleared, tuple(completions.values()))

    def expire_exact(self, closed: bool, not_updated_since_ms: int) -> Removal:
        removal = Removal(0, 0)
        for partition in sorted(self.ready):
            with self.deleting(partition) as store:
                removal += self.exact.expire(store, closed, not_updated_since_ms)
        return removal

    @contextlib.contextmanager
    def deleting(self, partition: int) -> Iterator[BatchStore]:
        """The partition's store for removing whole batches, straight, not through one intent
        (a pass of the reaper may remove more than one record holds). Each batch's item groups and
        answers go before its header, so a torn pass leaves batches that are whole or headers whose
        next pass finishes them, never records no header leads to."""
        store = self.store(partition)
        replay_intent(store)
        yield _Deleting(store)

    # -- estimated -------------------------------------------------------------------------------

    def create_estimated(self, batch_size: int, user_key: str | None) -> EstimatedBatch:
        """A new estimated batch whose UUID falls in a partition this worker serves."""
        ready = set(self.ready)
        if not ready:
            raise PartitionNotReady("this worker serves no batch table partition right now")
        while True:
            candidate = str(uuid.uuid4())
            partition = self.estimated_partition(candidate)
            if partition in ready:
                break
        return self.run(
            partition, lambda s: self.estimated.create(s, batch_size, user_key, now_ms(), lambda: candidate)
        )

    def get_estimated(self, batch_id: str) -> EstimatedBatch:
        return self.run(self.estimated_partition(batch_id), lambda s: self.estimated.get(s, batch_id))

    def add_estimated(
        self, batch_id: str, delta: int, request_id: str | None = None
    ) -> tuple[EstimatedBatch, Completion | None]:
        return self.run(
            self.estimated_partition(batch_id),
            lambda s: self.estimated.add(s, batch_id, delta, now_ms(), request_id),
        )

    def close_estimated(self, batch_id: str) -> tuple[EstimatedBatch, Completion | None]:
        return self.run(
            self.estimated_partition(batch_id), lambda s: self.estimated.close(s, batch_id, now_ms())
        )

    def delete_estimated(self, batch_id: str) -> None:
        self.run(self.estimated_partition(batch_id), lambda s: self.estimated.delete(s, batch_id))

    # -- reaper ----------------------------------------------------------------------------------

    def reap(self) -> Removal:
        """Expire open and closed batches (exact and estimated) older than the configured ages."""
        removal = Removal(0, 0)
        for closed, cutoff in self.reap_policy.cutoffs_ms(now_ms()).items():
            for partition in sorted(p for p in self.ready if self.serving(p)):
                with self.deleting(partition) as store:
                    removal += self.exact.expire(store, closed, cutoff)
                    removal += self.estimated.expire(store, closed, cutoff)
        if removal.batches_removed:
            log.info("reaper removed %d batches (%d items)", removal.batches_removed, removal.items_removed)
        return removal

    # -- completions -----------------------------------------------------------------------------

    async def publish(self, completions: Iterable[Completion]) -> None:
        """Send each completion event, wait until the broker confirmed it, then record that in the
        batch: until then any ack, close or get of the batch sends it again (at least once;
        consumers dedupe by batch id). One send per completion at a time in this worker: a get
        polling a batch while its last ack is being published does not send it a second time."""
        for completion in completions:
            key = (completion.kind, str(completion.batch_id))
            if key in self._publishing:
                continue  # sent by an ack or get here right now, which records it once confirmed
            self._publishing.add(key)
            try:
                await self._publish(completion)
            finally:
                self._publishing.discard(key)

    async def _publish(self, completion: Completion) -> None:

        log.info(
            "batch %s %s complete",
            completion.kind,
            completion.batch_id,
            extra={"batch_id": completion.batch_id},
        )
        crash_point("batch.completion.send")
        pending = await self.completions_topic.send(
            key=str(completion.batch_id).encode(), value=orjson.dumps(completion.as_event())
        )
        await pending
        crash_point("batch.completion.confirm")
        if completion.kind == "exact":
            batch_id = int(completion.batch_id)
            with (
                contextlib.suppress(PartitionNotReady),
                self.writing(self.exact_partition(batch_id)) as store,
            ):
                self.exact.confirm_completion(store, batch_id)
        else:
            estimated_id = str(completion.batch_id)
            partition = self.estimated_partition(estimated_id)
            with contextlib.suppress(PartitionNotReady), self.writing(partition) as store:
                self.estimated.confirm_completion(store, estimated_id)

    @staticmethod
    def due(batch: ExactBatch | EstimatedBatch) -> list[Completion]:
        """The completion a get must (re)send: complete and not confirmed yet."""
        if not batch.completion_due:
            return []
        kind = "exact" if isinstance(batch, ExactBatch) else "estimated"
        return [Completion(kind, batch.batch_id, batch.user_key, now_ms())]


class _Deleting:
    """A partition store whose every delete is its own changelog record: crash point
    `batch.table.delete` before each (reads and puts pass through)."""

    def __init__(self, store: BatchStore) -> None:
        self.store = store
        self.get, self.put, self.scan = store.get, store.put, store.scan

    def delete(self, key: bytes) -> None:
        crash_point("batch.table.delete")
        self.store.delete(key)
