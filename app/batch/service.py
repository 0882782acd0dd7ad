"""The batch service on one worker: which table partitions it serves, the domain rules applied to
them, where other partitions are served, and completion events.

Every mutating method is synchronous (no await between read and write), so HTTP views, the ack
agent and the reaper, all on the worker's event loop, never interleave inside one batch.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from app.batch.errors import PartitionNotReady
from app.batch.estimated import EstimatedRules
from app.batch.exact import AckOutcome, ExactRules, Removal
from app.batch.ids import GroupAcks, ItemGroup, partition_of_estimated, partition_of_exact
from app.batch.model import Completion, EstimatedBatch, ExactBatch
from app.batch.reaper import ReapPolicy
from app.settings import Settings

__all__ = ["BatchService", "now_ms"]

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class BatchService:
    def __init__(self, app: Any, table: Any, settings: Settings) -> None:
        from tables.batches import BATCH_TABLE

        self.app = app
        self.table = table
        self.table_name = BATCH_TABLE
        self.settings = settings
        self.partitions = settings.table_partitions
        self.exact = ExactRules(settings.batch_group_size_items, settings.batch_max_items_per_add)
        self.estimated = EstimatedRules()
        self.reap_policy = ReapPolicy(settings.batch_reap_open_after_s, settings.batch_reap_closed_after_s)
        self.ready: set[int] = set()
        self._round_robin = itertools.count()
        self._stores: dict[int, Any] = {}
        self.completions_topic: Any = None
        self._in_flight: list[Any] = []

    # -- ownership -------------------------------------------------------------------------------

    def mark_ready(self, partitions: Iterable[int]) -> None:
        self.ready = set(partitions)
        self._stores.clear()
        log.info("batch table partitions served here: %s", sorted(self.ready))

    def mark_unready(self) -> None:
        self.ready = set()
        self._stores.clear()

    def store(self, partition: int) -> Any:
        """The partition's store, or PartitionNotReady when this worker does not serve it now."""
        from tables.batches import PartitionStore

        if partition not in self.ready:
            raise PartitionNotReady(
                f"batch table partition {partition} is not served by this worker right now"
            )
        store = self._stores.get(partition)
        if store is None:
            store = self._stores[partition] = PartitionStore(self.table, partition, self._in_flight)
        return store

    async def flush(self) -> None:
        """Wait until every table change made so far is in the changelog (acknowledged by Kafka).

        Callers answer an HTTP request, or let Faust commit an ack record's offset, only after this:
        a worker killed right after an answer must not lose what the answer reported.
        """
        if not self._in_flight:
            return
        await asyncio.gather(*list(self._in_flight))  # what is in flight now; later writes are not ours
        self._in_flight[:] = [fut for fut in self._in_flight if not fut.done()]

    def owner_urls(self) -> dict[int, str]:
        """Partition -> web URL of the worker with the active replica (from Faust's assignor)."""
        from tables.batches import changelog_topic

        topic = changelog_topic(self.table)
        owners: dict[int, str] = {}
        for url, topics in self.app.router.table_metadata(self.table_name).items():
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
        return self.exact.create(self.store(partition), partition, self.partitions, user_key, now_ms())

    def get_exact(self, batch_id: int) -> ExactBatch:
        return self.exact.get(self.store(self.exact_partition(batch_id)), batch_id)

    def add_items(self, batch_id: int, items: int) -> list[ItemGroup]:
        store = self.store(self.exact_partition(batch_id))
        return self.exact.add_items(store, batch_id, items, now_ms(), lambda: str(uuid.uuid4()))

    def close_exact(self, batch_id: int) -> tuple[ExactBatch, Completion | None]:
        return self.exact.close(self.store(self.exact_partition(batch_id)), batch_id, now_ms())

    def split_by_partition(self, acks: Sequence[GroupAcks]) -> dict[int, list[GroupAcks]]:
        by_partition: dict[int, list[GroupAcks]] = defaultdict(list)
        for ack in acks:
            by_partition[self.exact_partition(ack.batch_id)].append(ack)
        return dict(by_partition)

    def check_acks(self, by_partition: dict[int, list[GroupAcks]]) -> None:
        for partition, acks in by_partition.items():
            self.exact.check(self.store(partition), acks)

    def ack(self, partition: int, acks: Sequence[GroupAcks]) -> AckOutcome:
        return self.exact.ack(self.store(partition), acks, now_ms())

    def expire_exact(self, closed: bool, not_updated_since_ms: int) -> Removal:
        removal = Removal(0, 0)
        for partition in sorted(self.ready):
            removal += self.exact.expire(self.store(partition), closed, not_updated_since_ms)
        return removal

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
        return self.estimated.create(self.store(partition), batch_size, user_key, now_ms(), lambda: candidate)

    def get_estimated(self, batch_id: str) -> EstimatedBatch:
        return self.estimated.get(self.store(self.estimated_partition(batch_id)), batch_id)

    def add_estimated(self, batch_id: str, delta: int) -> tuple[EstimatedBatch, Completion | None]:
        return self.estimated.add(self.store(self.estimated_partition(batch_id)), batch_id, delta, now_ms())

    def close_estimated(self, batch_id: str) -> tuple[EstimatedBatch, Completion | None]:
        return self.estimated.close(self.store(self.estimated_partition(batch_id)), batch_id, now_ms())

    def delete_estimated(self, batch_id: str) -> None:
        self.estimated.delete(self.store(self.estimated_partition(batch_id)), batch_id)

    # -- reaper ----------------------------------------------------------------------------------

    def reap(self) -> Removal:
        """Expire open and closed batches (exact and estimated) older than the configured ages."""
        removal = Removal(0, 0)
        for closed, cutoff in self.reap_policy.cutoffs_ms(now_ms()).items():
            for partition in sorted(self.ready):
                store = self.store(partition)
                removal += self.exact.expire(store, closed, cutoff)
                removal += self.estimated.expire(store, closed, cutoff)
        if removal.batches_removed:
            log.info("reaper removed %d batches (%d items)", removal.batches_removed, removal.items_removed)
        return removal

    # -- completions -----------------------------------------------------------------------------

    async def publish(self, completions: Iterable[Completion]) -> None:
        import orjson

        for completion in completions:
            log.info("batch %s %s complete", completion.kind, completion.batch_id)
            await self.completions_topic.send(
                key=str(completion.batch_id).encode(), value=orjson.dumps(completion.as_event())
            )
