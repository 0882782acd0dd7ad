"""The batch table's store keeps RocksDB behind the changelog: a change reaches the local database
only once Kafka confirmed its changelog record. Before, a change was put into RocksDB first; a
worker killed before the record reached Kafka restarted with the change in its database, the
redelivered ack found it done, and the changelog never got it (the kill -9 main-flow test saw the
batch stay pending)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocksdict import Rdict

from tables.batches import PartitionStore, PendingWrites


@dataclass
class Metadata:
    topic_partition: tuple[str, int]
    offset: int


@dataclass
class Sent:
    """A changelog send as Faust hands it to the callback."""

    metadata: Metadata

    def result(self) -> Metadata:
        return self.metadata


@dataclass
class Changelog:
    """Records handed to Kafka, confirmed only when the test says so."""

    sent: list[tuple[bytes, bytes | None, Any]] = field(default_factory=list)
    log: list[tuple[bytes, bytes | None]] = field(default_factory=list)

    def send_soon(self, *, key: bytes, value: bytes | None, partition: int, callback: Any, **_: Any) -> str:
        self.sent.append((key, value, callback))
        return f"future-{len(self.sent)}"

    def confirm(self, count: int) -> None:
        for key, value, callback in self.sent[:count]:
            self.log.append((key, value))
            callback(Sent(Metadata(("batches-changelog", 0), len(self.log) - 1)))
        del self.sent[:count]


@dataclass
class Data:
    db: Rdict
    persisted: dict[tuple[str, int], int] = field(default_factory=dict)

    def _db_for_partition(self, partition: int) -> Rdict:
        return self.db

    def set_persisted_offset(self, tp: tuple[str, int], offset: int) -> None:
        self.persisted[tp] = offset


@dataclass
class Table:
    data: Data
    changelog_topic: Changelog


def open_store(tmp_path: Path) -> tuple[PartitionStore, Table, list[Any]]:
    table = Table(Data(Rdict(str(tmp_path / "db"))), Changelog())
    in_flight: list[Any] = []
    return PartitionStore(table, 0, in_flight, PendingWrites()), table, in_flight


def test_rocksdb_gets_a_change_only_after_kafka_confirmed_it(tmp_path: Path) -> None:
    store, table, in_flight = open_store(tmp_path)
    store.put(b"h/1", b"header")
    store.put(b"g/1/0", b"bits")
    assert len(in_flight) == 2
    assert store.get(b"h/1") == b"header", "reads see the change at once"
    assert table.data.db.get(b"h/1") is None, "not in RocksDB while its record is unconfirmed"

    table.changelog_topic.confirm(1)
    assert table.data.db.get(b"h/1") == b"header"
    assert table.data.db.get(b"g/1/0") is None
    assert table.data.persisted == {("batches-changelog", 0): 0}

    table.changelog_topic.confirm(1)
    assert table.data.db.get(b"g/1/0") == b"bits"
    assert table.data.persisted == {("batches-changelog", 0): 1}
    assert dict(table.data.db.items()) == dict(table.changelog_topic.log)


def test_a_kill_with_records_in_flight_leaves_rocksdb_a_prefix_of_the_changelog(tmp_path: Path) -> None:
    store, table, _ = open_store(tmp_path)
    for n in range(5):
        store.put(f"g/1/{n}".encode(), b"set")
    store.delete(b"g/1/2")
    table.changelog_topic.confirm(3)  # then the process dies: the rest never reach Kafka
    restarted = dict(table.data.db.items())
    assert restarted == dict(table.changelog_topic.log)
    assert set(restarted) == {b"g/1/0", b"g/1/1", b"g/1/2"}


def test_reads_and_scans_merge_pending_writes_and_deletes(tmp_path: Path) -> None:
    store, table, _ = open_store(tmp_path)
    store.put(b"g/1/0", b"a")
    store.put(b"g/1/1", b"b")
    table.changelog_topic.confirm(2)
    store.delete(b"g/1/0")
    store.put(b"g/1/2", b"c")
    store.put(b"g/1/1", b"b2")
    assert store.get(b"g/1/0") is None
    assert list(store.scan(b"g/1/")) == [(b"g/1/1", b"b2"), (b"g/1/2", b"c")]
    assert list(store.scan(b"h/")) == []


def test_a_confirmed_older_write_does_not_hide_a_newer_one_in_flight(tmp_path: Path) -> None:
    store, table, _ = open_store(tmp_path)
    store.put(b"h/1", b"v1")
    store.put(b"h/1", b"v2")
    table.changelog_topic.confirm(1)
    assert store.get(b"h/1") == b"v2"
    assert table.data.db.get(b"h/1") == b"v1"
    table.changelog_topic.confirm(1)
    assert store.get(b"h/1") == b"v2" == table.data.db.get(b"h/1")
