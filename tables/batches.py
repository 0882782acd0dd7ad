"""The batch table: one RocksDB-backed Faust table with a changelog, written per explicit partition.

Every key of a batch lives in the partition that owns the batch (`app.batch.ids.partition_of_*`),
not where Faust's key hashing would put it, so writes go through `PartitionStore`: a changelog
record to the same partition, applied to RocksDB once Kafka confirmed it. Faust's recovery replays the
changelog into the same per-partition databases (verified to reach the newest record on the
embedded broker by tests/integration/batch/test_recovery.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from functools import partial
from typing import Any

import faust

from app.crashpoints import crash_point
from app.settings import Settings

__all__ = [
    "BATCH_TABLE",
    "FaustBatchTable",
    "PartitionStore",
    "PendingWrites",
    "batch_table",
    "changelog_topic",
]

BATCH_TABLE = "batches"


def batch_table(app: faust.App, settings: Settings) -> Any:
    return app.Table(
        BATCH_TABLE,
        key_type=bytes,
        value_type=bytes,
        partitions=settings.table_partitions,
        help="Carlyle batches: headers, item-group bitfields, id sequences",
    )


def changelog_topic(table: Any) -> str:
    name: str = table.changelog_topic.get_topic_name()
    return name


class PendingWrites:
    """One partition's writes sent to the changelog and not yet confirmed by Kafka: reads see
    them, RocksDB gets each only when Kafka confirmed it. So the local database never holds a
    change its changelog lacks: a worker killed with writes in flight restarts from a database the
    changelog agrees with, and the records whose offsets were not committed are applied again.
    (Written to RocksDB first, a change lost on its way to the changelog stayed in the database:
    the redelivered record found it done and wrote nothing, and whoever restored the partition
    from the changelog later never saw it; a batch stayed pending for good.)"""

    def __init__(self) -> None:
        self.values: dict[bytes, tuple[int, bytes | None]] = {}
        self._seq = itertools.count()

    def add(self, key: bytes, value: bytes | None) -> int:
        seq = next(self._seq)
        self.values[key] = (seq, value)
        return seq

    def confirmed(self, key: bytes, seq: int) -> None:
        held = self.values.get(key)
        if held is not None and held[0] == seq:  # a later write of the key is still in flight
            del self.values[key]


class PartitionStore:
    """The `BatchStore` port over one partition of the table: RocksDB behind the changelog."""

    def __init__(self, table: Any, partition: int, in_flight: list[Any], pending: PendingWrites) -> None:
        self.table = table
        self.partition = partition
        self._in_flight = in_flight  # changelog sends not yet confirmed; see BatchService.flush
        self._pending = pending

    def _db(self) -> Any:
        return self.table.data._db_for_partition(self.partition)

    def get(self, key: bytes) -> bytes | None:
        held = self._pending.values.get(key)
        if held is not None:
            return held[1]
        value: bytes | None = self._db().get(key)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self._write(key, bytes(value))

    def delete(self, key: bytes) -> None:
        self._write(key, None)

    def _write(self, key: bytes, value: bytes | None) -> None:
        seq = self._pending.add(key, value)
        self._in_flight.append(
            self.table.changelog_topic.send_soon(
                key=key,
                value=value,
                partition=self.partition,
                key_serializer="raw",
                value_serializer="raw",
                callback=partial(self._confirmed, key, value, seq),
                eager_partitioning=True,
            )
        )

    def _confirmed(self, key: bytes, value: bytes | None, seq: int, sent: Any) -> None:
        """Kafka has the record: now RocksDB may have it, then the offset Faust restores from."""
        db = self._db()
        if value is None:
            db.delete(key)
        else:
            db.put(key, value)
        crash_point("batch.table.local_applied")
        metadata = sent.result()
        self.table.data.set_persisted_offset(metadata.topic_partition, metadata.offset)
        self._pending.confirmed(key, seq)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        pending = {k: v for k, (_, v) in self._pending.values.items() if k.startswith(prefix)}
        if not pending:
            yield from self._scan_db(prefix)
            return
        merged = dict(self._scan_db(prefix))
        for key, value in pending.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        yield from sorted(merged.items())

    def _scan_db(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self._db().iter()
        it.seek(prefix)
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                break
            yield key, it.value()
            it.next()


class FaustBatchTable:
    """The `BatchTable` port over the Faust table: a `PartitionStore` per partition, whose pending
    (sent, unconfirmed) writes outlive the store objects the service drops at a rebalance."""

    name = BATCH_TABLE

    def __init__(self, table: Any) -> None:
        self.table = table
        self._pending: dict[int, PendingWrites] = {}

    def partition_store(self, partition: int, in_flight: list[Any]) -> PartitionStore:
        pending = self._pending.setdefault(partition, PendingWrites())
        return PartitionStore(self.table, partition, in_flight, pending)

    def changelog_topic(self) -> str:
        return changelog_topic(self.table)
