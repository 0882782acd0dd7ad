"""RQ/DLQ copies their group's state does not know: the broker confirmed the copy, then the shard
died (or its state write failed) before the GroupState that records it reached the changelog.

Left alone, such a copy broke the group's order: the MQ message it copies was read again after
the restart (its offset was never committed), delivered, and the group's later messages with it;
then the copy came out of RQ and was delivered once more, after them. A shard therefore adopts
them when it starts, before it reads MQ: each copy is recorded as if its state write had landed
(sidelined, or dead-lettered), so the MQ replay of its message is skipped and the copy keeps its
place in the group's order.

Copies are recognised as this subscription's by their incarnation header (RQ/DLQ topics outlive a
deleted subscription of the same name). Copies fed from an older RQ storage topic after a shard
change are written by the shard that read them, not the one that owns their group, so they are
not adopted. Each carries, in its fed header, the place its group's owner wrote it (storage topic
index, offset), and the owner's rules judge it there (`fed_place`): its group's state records RQ
copies by those places, so a copy fed twice (the feeder cut and restarted) is skipped as already
read, and the group's later messages wait until its last copy written before the change is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.subscription.errors import UndecodableMessage
from app.subscription.records import Headers, InternalMeta, decode_group_id, decode_internal, header_map
from app.subscription.state import GroupState, MessageState, Position, on_dead_lettered, on_sidelined

__all__ = [
    "FED_HEADER",
    "INCARNATION_HEADER",
    "Copy",
    "Queue",
    "adopt",
    "consumed_before",
    "copy_of",
    "fed_headers",
    "fed_place",
]

INCARNATION_HEADER = "hs-incarnation"
FED_HEADER = "hs-fed"  # "<storage topic index>:<offset>" where the group's owner wrote the copy

Queue = Literal["rq", "dlq"]


@dataclass(frozen=True, slots=True)
class Copy:
    queue: Queue
    group_id: str
    meta: InternalMeta
    at: MessageState  # its main position and where it sits in RQ/DLQ


def copy_of(
    queue: Queue,
    key: bytes | None,
    headers: Headers | None,
    at: tuple[int, int],
    incarnation: str,
    max_group_id_bytes: int,
) -> Copy | None:
    """The copy a record at `at` (storage topic index, offset) holds, or None when it is not one
    this subscription's shard wrote for a group it owns (another incarnation's, fed, undecodable)."""
    found = header_map(headers)
    if found.get(INCARNATION_HEADER) != incarnation.encode() or FED_HEADER in found:
        return None
    try:
        group = decode_group_id(key, max_group_id_bytes)
        meta = decode_internal(headers)
    except UndecodableMessage:
        return None
    return Copy(queue, group, meta, MessageState.at(meta.main, at))


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


def fed_headers(headers: Headers | None, at: Position) -> dict[str, bytes]:
    """The headers of an RQ record at `at` fed into a newer RQ storage topic: a record fed before
    keeps the place it was first fed from."""
    out = header_map(headers)
    out.setdefault(FED_HEADER, f"{at[0]}:{at[1]}".encode())
    return out


def fed_place(headers: Headers | None) -> Position | None:
    """Where the group's owner wrote a fed copy; None for a copy that was not fed (or was fed by a
    version that did not record the place: it is judged where it is read)."""
    value = header_map(headers).get(FED_HEADER)
    if not value:
        return None
    try:
        idx, offset = (int(x) for x in value.decode().split(":"))
    except (ValueError, UnicodeDecodeError):
        return None
    return (idx, offset)
