"""The batch table: one RocksDB-backed Faust table with a changelog, written per explicit partition.

Every key of a batch lives in the partition that owns the batch (`app.batch.ids.partition_of_*`),
not where Faust's key hashing would put it, so writes go through `PartitionStore`: RocksDB put plus
a changelog record to the same partition. Faust's recovery replays the
changelog into the same per-partition databases (verified to reach the newest record on the
embedded broker by tests/integration/batch/test_recovery.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import faust

from app.settings import Settings

__all__ = ["BATCH_TABLE", "PartitionStore", "batch_table", "changelog_topic"]

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


class PartitionStore:
    """The `BatchStore` port over one partition of the table (local RocksDB + changelog)."""

    def __init__(self, table: Any, partition: int, in_flight: list[Any]) -> None:
        self.table = table
        self.partition = partition
        self._db = table.data._db_for_partition(partition)
        self._in_flight = in_flight  # changelog sends not yet confirmed; see BatchService.flush

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        value = bytes(value)
        self._db.put(key, value)
        self._in_flight.append(
            self.table.send_changelog(
                self.partition, key, value, key_serializer="raw", value_serializer="raw"
            )
        )

    def delete(self, key: bytes) -> None:
        self._db.delete(key)
        self._in_flight.append(
            self.table.send_changelog(self.partition, key, None, key_serializer="raw", value_serializer="raw")
        )

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                break
            yield key, it.value()
            it.next()
