"""The storage-reader part of a running copy (`KeyedConsumer`, app.consumer.kafka) with a composite
source: a second Kafka consumer, assigned by hand the partitions of the storage topic being read
that hold the keys of the copy's lane partitions (`Source.partitions_of`).

The group consumer is assigned lane partitions only (those of `<name>-retry`); the storage
partitions follow from them. Kafka's range assignment cannot do that for a storage topic with
another partition count (K·B): with three copies of four lanes it gives partitions 0-2, 3-5 and
6-7 of eight, which split lane 1's partitions 2 and 3 over two copies. Offsets are committed by
the group consumer under the group's name, as for any partition.

Every call is made on the poll thread, which owns both consumers.
"""

from __future__ import annotations

import logging

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from app.consumer.model import ConsumerSettings
from app.consumer.parts import TP
from app.consumer.source import Source
from app.kafka.broker import FetchGuard, broker_for, confluent_seek
from app.kafka.consuming import partition_reader

__all__ = ["StorageReading"]

log = logging.getLogger(__name__)


class StorageReading:
    """The storage-reader part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    _source: Source
    read_idx: int
    _reader: Consumer | None
    _reader_guard: FetchGuard | None
    _reader_idx: int  # the storage index the reader's assignment is of
    _reader_lanes: set[int]  # the lane partitions whose storage partitions it is assigned

    def _open_reader(self) -> None:
        s = self.settings
        reader = partition_reader(
            s.bootstrap, f"{s.name}-storage-reader", overrides={"client.id": self.member_id}
        )
        self._reader = reader
        # Only starts are checked: a storage topic may be compacted.
        self._reader_guard = broker_for(s).fetch_guard(confluent_seek(reader), compacted=True)
        self._reader_idx = self.read_idx

    def _storage_tps(self, lanes: set[int] | list[int], idx: int | None = None) -> list[TP]:
        """The storage partitions of `lanes` in storage topic `idx` (the one read by default)."""
        at = self._reader_idx if idx is None else idx
        topic = self._source.composite.storage_topics[at].name
        return [(topic, q) for q in self._source.partitions_of(at, set(lanes))]

    def _reader_assign(self, starts: dict[TP, int]) -> None:
        """Add storage partitions to the reader at these offsets (negative: never committed, from
        the beginning)."""
        if self._reader is None or not starts:
            return
        tps = [TopicPartition(t, p, o if o >= 0 else OFFSET_BEGINNING) for (t, p), o in starts.items()]
        assert self._reader_guard is not None
        self._reader_guard.expect_all(tps)
        self._reader.incremental_assign(tps)

    def _reader_take(self, lanes: list[int], committed: dict[TP, int]) -> None:
        """Read the storage partitions of newly owned `lanes` from their committed offsets."""
        self._reader_lanes.update(lanes)
        self._reader_assign({tp: committed.get(tp, -1) for tp in self._storage_tps(lanes)})

    def _reader_drop(self, lanes: set[int] | list[int]) -> list[TP]:
        """Stop reading the storage partitions of `lanes`; those partitions (to drain and commit)."""
        gone = [lane for lane in lanes if lane in self._reader_lanes]
        if self._reader is None or not gone:
            return []
        self._reader_lanes.difference_update(gone)
        tps = self._storage_tps(gone)
        assert self._reader_guard is not None
        self._reader_guard.forget(tps)
        try:
            self._reader.incremental_unassign([TopicPartition(t, p) for t, p in tps])
        except KafkaException as exc:  # not assigned (yet): nothing to stop
            log.info("%s: storage partitions %s not unassigned: %s", self.member_id, tps, exc)
        return tps

    def _reader_follow(self, group: Consumer) -> None:
        """The copy moved on to the next storage topic (`CompositeFollowing`): read its partitions
        of the lanes from the group's commits instead of the drained topic's."""
        if self._reader is None or self.read_idx == self._reader_idx:
            return
        old = self._storage_tps(self._reader_lanes)
        self._reader_idx = self.read_idx
        if old:
            assert self._reader_guard is not None
            self._reader_guard.forget(old)
            self._reader.incremental_unassign([TopicPartition(t, p) for t, p in old])
        new = self._storage_tps(self._reader_lanes)
        asked = [TopicPartition(t, p) for t, p in new]
        committed = group.committed(asked, timeout=30) if asked else []
        self._reader_assign({(tp.topic, tp.partition): tp.offset for tp in committed})
        log.info("%s: reads %s of its lanes %s", self.member_id, new, sorted(self._reader_lanes))

    def _lane_of(self, tp: TP) -> int:
        """The lane partition of a partition read: a storage partition's q // K, else itself."""
        idx = self._source.index_of(tp[0])
        return tp[1] if idx is None else tp[1] // self._source.k_of(idx)

    def _reader_consume(self, timeout_s: float) -> list[KafkaMessage]:
        if self._reader is None or not self._reader_lanes:
            return []
        assert self._reader_guard is not None
        return self._reader_guard.admit(self._reader.consume(1000, timeout_s))

    def _reader_assignment(self) -> list[TopicPartition]:
        return self._reader.assignment() if self._reader is not None else []

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
