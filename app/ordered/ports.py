"""The ordered-delivery engine's ports: where group states live, where retry and dead-letter
copies go, and who takes a message. Each host (the subscription platform, the consumer library)
gives its own adapters; `app.ordered.memory` has in-memory fakes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from app.ordered.lease import OwnerRecord
from app.ordered.rules import GroupState, Position
from app.ordered.work import Work

__all__ = ["Deliver", "GroupStates", "OwnerLog", "Queues"]


class GroupStates(Protocol):
    """The groups' states of the lanes the host owns, by (main partition, ordering key); a host
    whose states are keyed by group alone ignores the partition. `put` returns once the state is
    as durable as the host promises before the record's offset may be committed."""

    def get(self, partition: int, key: str) -> GroupState | None: ...
    async def put(self, partition: int, key: str, state: GroupState) -> None: ...


class Queues(Protocol):
    """Copies to RQ and DLQ, with the engine's hs-* `headers` (the host adds its own); each
    returns where the broker confirmed the copy, as (storage topic index, offset). Raises
    `app.ordered.errors.CopyRefused` when the queue refuses the copy for good."""

    async def to_retry(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position: ...
    async def to_dlq(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position: ...


Deliver = Callable[[Work], Awaitable[bool]]
"""Hand the work's message to the endpoint or handler; raise to fail it; False when the host's
filter dropped it unseen (a main record only)."""


class OwnerLog(Protocol):
    """The shared log of lane claims and releases (`app.ordered.lease`), one for every process
    that may own the lanes. Writes return once the log confirmed them; `read_new` returns the
    records written since its last call, in log order, up to the log's end as asked at the call.
    A claim declares its owner's lease duration, which a successor waits out."""

    def claim(self, lane: str, owner: str, nonce: str, lease_s: float) -> None: ...
    def release(self, lane: str, epoch: int) -> None: ...
    def read_new(self) -> list[OwnerRecord]: ...
