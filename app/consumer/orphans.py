"""Retry and DLQ copies their key's state does not know: the broker confirmed the copy, then the
copy died (or its state write failed) before the state recording it was written. The rule and
the reason are the subscription's (`app.subscription.orphans.adopt`): left alone, the source
record is handled again after the restart, and the copy comes out of the retry topic after the
key's later messages. A copy taking a partition adopts them before it reads the partition.

It reads the retry partition from its committed offset and the DLQ partition from the partition's
DLQ mark: the offset below which every DLQ copy is recorded in its key's state (or needs no state),
written by the owner to `<name>-state` under a key no ordering key can have. The mark cannot be
derived from the key states alone: keys run concurrently, so key B's copy at DLQ offset 6 can be
recorded while key A's copy at 5 is not yet when the copy dies; the highest recorded position says
nothing about A. `DlqMark` follows the copies whose state has not landed instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.consumer.engine import KEY_HEADER
from app.ordered.errors import UndecodableMessage
from app.ordered.orphans import Copy, Queue, adopt
from app.ordered.ports import GroupStates
from app.ordered.records import Headers, decode_internal, header_map
from app.ordered.rules import MessageState

__all__ = ["DLQ_MARK_KEY", "DlqMark", "adopt_copies", "copy_at"]

DLQ_MARK_KEY = b"\xffdlq-mark"  # not UTF-8, so never the encoded ordering key of a state record


def copy_at(queue: Queue, offset: int, headers: Headers | None) -> Copy | None:
    """The copy a retry/DLQ record holds (None: not one of ours, or undecodable)."""
    key = header_map(headers).get(KEY_HEADER)
    if key is None:
        return None
    try:
        meta = decode_internal(headers)
    except UndecodableMessage:
        return None
    return Copy(queue, key.decode("utf-8", "replace"), meta, MessageState.at(meta.main, (0, offset)))


async def adopt_copies(states: GroupStates, partition: int, copies: Iterable[Copy]) -> int:
    """Record each copy its key's state lacks (durably); returns how many were adopted."""
    adopted = 0
    earlier: dict[str, list[MessageState]] = {}  # retry copies read before, per key
    for copy in copies:
        new = adopt(states.get(partition, copy.group_id), copy, 0, earlier.get(copy.group_id, []))
        if new is not None:
            await states.put(partition, copy.group_id, new)
            adopted += 1
        if copy.queue == "rq":
            earlier.setdefault(copy.group_id, []).append(copy.at)
    return adopted


class DlqMark:
    """One DLQ partition, in the copy that owns it: the offset below which every copy is recorded
    in its key's state (or needs none). `floor`: where the owner's adoption read ended (everything
    below is recorded or adopted). Unknown (None) while a copy is being written: its offset, below
    those confirmed after it, is not known yet."""

    def __init__(self, floor: int) -> None:
        self._end = floor  # after the highest copy confirmed (or the floor)
        self._unrecorded: set[int] = set()  # confirmed copies whose key state has not landed
        self._sending = 0

    def sending(self) -> None:
        self._sending += 1

    def confirmed(self, offset: int, *, needs_state: bool = True) -> None:
        self._sending -= 1
        self._end = max(self._end, offset + 1)
        if needs_state:
            self._unrecorded.add(offset)

    def failed(self) -> None:
        self._sending -= 1

    def recorded(self, offset: int) -> None:
        """A key state recording the copy at `offset` is durable."""
        self._unrecorded.discard(offset)

    @property
    def mark(self) -> int | None:
        if self._sending:
            return None
        return min(self._unrecorded) if self._unrecorded else self._end
