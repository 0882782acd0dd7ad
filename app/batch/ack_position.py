"""Where the ack agent stands in each partition of the ack topic, kept in the batch table itself.

Faust commits the ack topic's offsets on its own, and it can commit past a record its agent never
handled: a record dropped from a stream buffer at a rebalance is fetched again only from the
committed offset, and Faust treats a committed offset of 0 as none at all, so the next record's
ack commits past it (seen in a crash test: a batch 1,268 acks short for good). The table therefore
keeps its own position per partition, `POSITION_KEY` in the table partition of the same number
(the ack topic and the table are co-partitioned), written after the effects of the records it
covers, to the same changelog partition. The agent handles each partition's records strictly in
offset order from that position: a record behind it was handled already; a record ahead of it
means one was skipped, and the agent seeks back to the position. A partition whose records stopped
coming while some are left before its end is sought back by a watchdog. A jump that keeps coming
back after the seeks (retention took the records, or offsets without records) is believed by the
readers' common rule (`app.kafka.sequence.Jump`).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from app.batch.model import BatchStore
from app.kafka.sequence import Jump

__all__ = [
    "POSITION_KEY",
    "RESEEK_AFTER_S",
    "STALLED_AFTER_S",
    "AckCursor",
    "Verdict",
    "read_position",
    "write_position",
]

POSITION_KEY = b"a/next"
RESEEK_AFTER_S = 5.0  # a seek back that brought nothing after this long is repeated
STALLED_AFTER_S = 5.0  # no record handled this long while records are left: seek back
_OFFSET = struct.Struct(">q")


class Verdict(enum.Enum):
    HANDLE = "handle"  # the record at the position: handle it, then the position moves past it
    SEEN = "seen"  # behind the position: handled before (a replay after a seek or a restart)
    SEEK = "seek"  # ahead of the position: a record was skipped; seek back to the position
    WAIT = "wait"  # ahead, and a seek back is already under way


def read_position(store: BatchStore) -> int | None:
    raw = store.get(POSITION_KEY)
    return None if raw is None else int(_OFFSET.unpack(raw)[0])


def write_position(store: BatchStore, next_offset: int) -> None:
    """The position moves forward only (a late write of an older batch of records is a no-op)."""
    known = read_position(store)
    if known is None or next_offset > known:
        store.put(POSITION_KEY, _OFFSET.pack(next_offset))


@dataclass
class AckCursor:
    """One ack-topic partition as this worker handles it (pure: the caller passes the time)."""

    expected: int  # the next offset to handle
    last_progress: float
    sought_at: float | None = None
    jump: Jump | None = None  # the record ahead, as last judged

    def admit(self, offset: int, now: float) -> Verdict:
        if offset < self.expected:
            return Verdict.SEEN
        if offset == self.expected:
            return Verdict.HANDLE
        if self.sought_at is not None and now - self.sought_at < RESEEK_AFTER_S:
            return Verdict.WAIT
        self.jump = Jump.sighted(self.jump, self.expected, offset, now)
        if self.jump.believed(now):
            return Verdict.HANDLE  # the offsets before it are gone: go on from it
        self.sought_at = now
        return Verdict.SEEK

    def handled(self, offset: int, now: float) -> None:
        self.expected = offset + 1
        self.last_progress = now
        self.sought_at = None
        self.jump = None

    def quiet(self, now: float) -> bool:
        """No record handled, nor a seek back made, for STALLED_AFTER_S."""
        return now - max(self.last_progress, self.sought_at or 0.0) >= STALLED_AFTER_S

    def stalled(self, end: int, now: float) -> bool:
        """Records are left before `end` and none was handled for a while: seek back (and note
        the seek, so the next check waits for it)."""
        if self.expected < end and self.quiet(now):
            self.sought_at = now
            return True
        return False
