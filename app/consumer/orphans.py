"""Retry and DLQ copies their key's state does not know: the broker confirmed the copy, then the
copy died (or its state write failed) before the state recording it was written. The rule and
the reason are the subscription's (`app.subscription.orphans.adopt`): left alone, the source
record is handled again after the restart, and the copy comes out of the retry topic after the
key's later messages. A copy taking a partition adopts them before it reads the partition.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.consumer.engine import KEY_HEADER, StateLog
from app.subscription.errors import UndecodableMessage
from app.subscription.orphans import Copy, Queue, adopt
from app.subscription.records import Headers, decode_internal
from app.subscription.state import MessageState

__all__ = ["adopt_copies", "copy_at"]


def copy_at(queue: Queue, offset: int, headers: Headers | None) -> Copy | None:
    """The copy a retry/DLQ record holds (None: not one of ours, or undecodable)."""
    found = dict(headers or ())
    key = found.get(KEY_HEADER)
    if key is None:
        return None
    try:
        meta = decode_internal(headers)
    except UndecodableMessage:
        return None
    return Copy(queue, key.decode("utf-8", "replace"), meta, MessageState.at(meta.main, (0, offset)))


async def adopt_copies(states: StateLog, partition: int, copies: Iterable[Copy]) -> int:
    """Record each copy its key's state lacks (durably); returns how many were adopted."""
    adopted = 0
    for copy in copies:
        new = adopt(states.get(partition, copy.group_id), copy, 0)
        if new is not None:
            await states.put(partition, copy.group_id, new)
            adopted += 1
    return adopted
