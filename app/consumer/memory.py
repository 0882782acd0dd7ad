"""In-memory fakes of the engine's ports, for unit tests and model checks."""

from __future__ import annotations

from collections.abc import Sequence

from app.consumer.engine import Work
from app.subscription.state import GroupState

__all__ = ["MemoryQueues", "MemoryStateLog"]


class MemoryStateLog:
    def __init__(self) -> None:
        self.states: dict[tuple[int, str], GroupState] = {}
        self.writes = 0

    def get(self, partition: int, key: str) -> GroupState | None:
        return self.states.get((partition, key))

    async def put(self, partition: int, key: str, state: GroupState) -> None:
        self.states[(partition, key)] = state
        self.writes += 1


class MemoryQueues:
    """Retry and dead-letter topics as lists per partition: (work, headers) in write order."""

    def __init__(self) -> None:
        self.retry: dict[int, list[tuple[Work, dict[str, bytes]]]] = {}
        self.dlq: dict[int, list[tuple[Work, dict[str, bytes]]]] = {}

    async def to_retry(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> int:
        return _append(self.retry, work, headers)

    async def to_dlq(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> int:
        return _append(self.dlq, work, headers)


def _append(
    queues: dict[int, list[tuple[Work, dict[str, bytes]]]], work: Work, headers: Sequence[tuple[str, bytes]]
) -> int:
    log = queues.setdefault(work.partition, [])
    log.append((work, dict(headers)))
    return len(log) - 1
