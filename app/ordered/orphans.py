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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.ordered.records import InternalMeta
from app.ordered.rules import GroupState, MessageState, on_dead_lettered, on_sidelined

__all__ = ["Copy", "Queue", "adopt", "consumed_before"]

Queue = Literal["rq", "dlq"]


@dataclass(frozen=True, slots=True)
class Copy:
    queue: Queue
    group_id: str
    meta: InternalMeta
    at: MessageState  # its main position and where it sits in RQ/DLQ


def adopt(
    state: GroupState | None, copy: Copy, generation: int, earlier: Sequence[MessageState] = ()
) -> GroupState | None:
    """The group's state with `copy` recorded, or None when the state already records it.
    `earlier`: the group's RQ copies read before it by the same adoption read (known or not)."""
    if copy.queue == "rq":
        if state is not None and state.rq.p is not None and state.rq.p.internal >= copy.at.internal:
            return None
        failed = copy.meta.failure is not None and not copy.meta.replay
        read = consumed_before(copy, earlier)
        return on_sidelined(
            state, copy.meta.main, copy.at, failed=failed, read_from_rq=read, generation=generation
        )
    if state is not None and state.dlq.p is not None and state.dlq.p.internal >= copy.at.internal:
        return None
    return on_dead_lettered(state, copy.meta.main, copy.at, generation=generation)


def consumed_before(copy: Copy, earlier: Sequence[MessageState]) -> MessageState | None:
    """The group's newest RQ copy that had been read when `copy` was written, as the copy itself
    proves; None when it proves none. A crash may lose the state writes of those reads with the
    copy's own: the restart then read them again and delivered their message after the messages
    that followed it (`0, 1, 0, 2`: the copy of 2 marks 2 handled, so 1 was not read again).

    A failed attempt was a delivery: from MQ only with nothing of the group pending in RQ, from
    RQ only with every earlier copy read and no copy of an earlier message pending behind it. So
    every copy written before it of a message up to its own was read: the newest such is the
    mark. A copy sidelined again was written for the read of the message's previous copy."""
    if copy.queue != "rq" or copy.meta.replay:
        return None
    main = copy.meta.main
    if copy.meta.failure is not None:
        found = [e for e in earlier if e.internal < copy.at.internal and e.main <= main]
    else:
        found = [e for e in earlier if e.internal < copy.at.internal and e.main == main]
    return max(found, key=lambda e: e.internal, default=None)
