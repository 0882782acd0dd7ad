"""In-memory fakes of the engine's ports, for unit tests, model checks and benches."""

from __future__ import annotations

from collections.abc import Sequence

from app.ordered.lease import OwnerRecord
from app.ordered.rules import GroupState, Position
from app.ordered.work import Work

__all__ = ["MemoryOwnerLog", "MemoryQueues", "MemoryStateLog"]


class MemoryStateLog:
    """Group states by (partition, ordering key); `writes` counts the puts."""

    def __init__(self) -> None:
        self.states: dict[tuple[int, str], GroupState] = {}
        self.writes = 0

    def get(self, partition: int, key: str) -> GroupState | None:
        return self.states.get((partition, key))

    async def put(self, partition: int, key: str, state: GroupState) -> None:
        self.states[(partition, key)] = state
        self.writes += 1


class MemoryQueues:
    """RQ and DLQ as lists per main partition, one storage topic each: (work, headers) in write
    order, a copy's offset its index."""

    def __init__(self) -> None:
        self.retry: dict[int, list[tuple[Work, dict[str, bytes]]]] = {}
        self.dlq: dict[int, list[tuple[Work, dict[str, bytes]]]] = {}

    async def to_retry(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position:
        return _append(self.retry, work, headers)

    async def to_dlq(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position:
        return _append(self.dlq, work, headers)


def _append(
    queues: dict[int, list[tuple[Work, dict[str, bytes]]]], work: Work, headers: Sequence[tuple[str, bytes]]
) -> Position:
    log = queues.setdefault(work.partition, [])
    log.append((work, dict(headers)))
    return (0, len(log) - 1)


class MemoryOwnerLog:
    """One owner log shared by every owner of a test: `records` in write order (a claim's offset
    its index); each reader is a view of its own with its own read position."""

    def __init__(self, records: list[OwnerRecord] | None = None) -> None:
        self.records: list[OwnerRecord] = [] if records is None else records
        self._read = 0

    def reader(self) -> MemoryOwnerLog:
        """Another process's handle on the same log."""
        return MemoryOwnerLog(self.records)

    def claim(self, lane: str, owner: str, nonce: str, lease_s: float = 0.0) -> None:
        self.records.append(
            OwnerRecord("claim", lane, len(self.records), owner=owner, nonce=nonce, lease_s=lease_s)
        )

    def release(self, lane: str, epoch: int) -> None:
        self.records.append(OwnerRecord("release", lane, len(self.records), epoch=epoch))

    def read_new(self) -> list[OwnerRecord]:
        new = self.records[self._read :]
        self._read = len(self.records)
        return new
