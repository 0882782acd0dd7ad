"""What the ordered-delivery engine works on: one record read from the main topic or from RQ, with
its ordering key and the places its group's rules judge it by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.ordered.records import InternalMeta
from app.ordered.rules import MessageState, Position

__all__ = ["RecordStub", "SourceRecord", "Work"]


class SourceRecord(Protocol):
    """A fetched record as the engine reads it (aiokafka's ConsumerRecord is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True, slots=True)
class RecordStub:
    """A record's place without its payload or headers (what stands in for a refused copy)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = b""
    headers: Sequence[tuple[str, bytes]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Work:
    """A record and its group. `meta` is set for a copy read from RQ (its hs-* headers).

    `partition` is the main partition (the library's lane partition; a copy's is the one its
    headers name). `storage_idx` is the storage topic the record was read in: the main topic's
    for a main record, RQ's for a copy. `read_at` places a copy elsewhere than where it was read
    (a copy fed after a shard-count change is judged where its group's owner wrote it)."""

    record: SourceRecord
    partition: int
    ordering_key: str
    meta: InternalMeta | None = None
    undecodable: str = ""  # why the record cannot be handled (it goes to the DLQ)
    storage_idx: int = 0
    read_at: Position | None = None

    @property
    def lane(self) -> tuple[int, str]:
        return (self.partition, self.ordering_key)

    @property
    def main(self) -> Position:
        return self.meta.main if self.meta is not None else (self.storage_idx, self.record.offset)

    @property
    def read(self) -> MessageState | None:
        """Where this copy sits in RQ for its group's rules (None for main records)."""
        if self.meta is None:
            return None
        return MessageState.at(self.meta.main, self.read_at or (self.storage_idx, self.record.offset))

    @property
    def source(self) -> str:
        """`topic[partition]@offset`, as failure headers name where a copy was read."""
        rec = self.record
        return f"{rec.topic}[{rec.partition}]@{rec.offset}"

    @property
    def where(self) -> str:
        """The record's place as logs name it: `topic[partition] offset=N`."""
        rec = self.record
        return f"{rec.topic}[{rec.partition}] offset={rec.offset}"
