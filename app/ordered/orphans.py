"""Retry and dead-letter copies their group's state does not know: the broker confirmed the copy,
then the copy's owner died (or its state write failed) before the GroupState that records it was
durable.

Left alone, such a copy broke the group's order: the main message it copies was read again after
the restart (its offset was never committed), delivered, and the group's later messages with it;
then the copy came out of RQ and was delivered once more, after them. An owner therefore adopts
them when it takes a lane, before it reads the main topic: each copy is recorded as if its state
write had landed (sidelined, or dead-lettered), so the main replay of its message is skipped and
the copy keeps its place in the group's order. Each host finds the copies in its own queues
(`app.subscription.orphans`, `app.consumer.orphans`); the rule is this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.ordered.records import InternalMeta
from app.ordered.rules import GroupState, MessageState, on_dead_lettered, on_sidelined

__all__ = ["Copy", "Queue", "adopt"]

Queue = Literal["rq", "dlq"]


@dataclass(frozen=True, slots=True)
class Copy:
    queue: Queue
    group_id: str
    meta: InternalMeta
    at: MessageState  # its main position and where it sits in RQ/DLQ


def adopt(state: GroupState | None, copy: Copy, generation: int) -> GroupState | None:
    """The group's state with `copy` recorded, or None when the state already records it."""
    if copy.queue == "rq":
        if state is not None and state.rq.p is not None and state.rq.p.internal >= copy.at.internal:
            return None
        failed = copy.meta.failure is not None and not copy.meta.replay
        return on_sidelined(state, copy.meta.main, copy.at, failed=failed, generation=generation)
    if state is not None and state.dlq.p is not None and state.dlq.p.internal >= copy.at.internal:
        return None
    return on_dead_lettered(state, copy.meta.main, copy.at, generation=generation)
