"""Where the ack agent stands in each partition of the ack topic, kept in the batch table itself.

The agent handles each partition's records strictly in offset order from its own position
(`app.kafka.in_order`: Faust's committed offset can pass a record the agent never handled). The
position is `POSITION_KEY` in the table partition of the same number (the ack topic and the table
are co-partitioned), written after the effects of the records it covers, to the same changelog
partition.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Collection, Hashable
from typing import Protocol, TypeVar

from app.batch.model import BatchStore

__all__ = ["POSITION_KEY", "AckTable", "read_position", "write_position"]

POSITION_KEY = b"a/next"
_OFFSET = struct.Struct(">q")

T = TypeVar("T")


def read_position(store: BatchStore) -> int | None:
    raw = store.get(POSITION_KEY)
    return None if raw is None else int(_OFFSET.unpack(raw)[0])


def write_position(store: BatchStore, next_offset: int) -> None:
    """The position moves forward only (a late write of an older batch of records is a no-op)."""
    known = read_position(store)
    if known is None or next_offset > known:
        store.put(POSITION_KEY, _OFFSET.pack(next_offset))


class Partitions(Protocol):
    """What the positions need of the batch service: which table partitions are served here, and
    an all-or-nothing operation on one."""

    ready: set[int]
    revocations: int

    def serving(self, partition: int) -> bool: ...

    def run(self, partition: int, operation: Callable[[BatchStore], T]) -> T: ...


class AckTable:
    """The ack agent's positions in the batch table (an `app.kafka.in_order.PositionStore`)."""

    def __init__(self, service: Partitions) -> None:
        self.service = service

    def ownership(self) -> Hashable:
        return (self.service.revocations, frozenset(self.service.ready))

    def served(self) -> Collection[int]:
        return self.service.ready

    def serves(self, partition: int) -> bool:
        return self.service.serving(partition)

    def read(self, partition: int) -> int | None:
        return self.service.run(partition, read_position)

    def write(self, partition: int, next_offset: int) -> None:
        self.service.run(partition, functools.partial(write_position, next_offset=next_offset))
