"""Records in sequence: a reader's check that each record continues its partition at the offset
the reader expects, and reads back what its Kafka client skipped.

Seen once in ~10 main-job runs on the embedded broker: a partition assigned at its beginning while
the ingest wrote it started at offset 3,223, and those rows never reached the MySQL mirror. The
embedded broker (Tansu 0.6, memory storage) answers ListOffsets(earliest) with the batch *written*
first; concurrent producers (Spark tasks) can write a later offset's batch before an earlier one's,
and a client resolving "the beginning" then starts past records the log holds.

A reader that knows where each partition starts hands its batches through `SequenceGuard.admit`: a
record (or end-of-partition event) past the expected offset makes the guard seek back to the
expected offset. It does not ask the broker where the log starts: that is the answer that was
wrong. When retention took the offsets, the client's reset brings it back to the same place; the
guard believes a jump once it has come back `MAX_REREADS` times over at least `BELIEVE_AFTER_S`,
as do offsets without records (compaction, transaction markers). The time bound matters: the
broker assigns a batch its offsets before it stores it, so for a moment a read finds a later batch
where an earlier one will be. On a compacted topic gaps are everywhere, so a guard made with
`compacted=True` checks only the first record after each placement (where the skip was seen): a
reader starting over a big compacted changelog does not read every gap again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

__all__ = ["BELIEVE_AFTER_S", "MAX_REREADS", "Jump", "SequenceGuard", "reread_from"]

log = logging.getLogger(__name__)

MAX_REREADS = 3
BELIEVE_AFTER_S = 1.0

Partition = tuple[str, int]
Seek = Callable[[str, int, int], None]  # (topic, partition, offset)


class HasOffset(Protocol):
    @property
    def offset(self) -> int: ...


R = TypeVar("R", bound=HasOffset)


def reread_from(expected: int, offset: int, times: int, seen_for_s: float) -> int | None:
    """Where to read a partition from again, or None to take the record at `offset`.

    `expected`: the offset the reader expects next; `times`: how often this same jump has been
    seen, this one included; `seen_for_s`: since when. A jump must outlast both bounds: a batch
    whose offsets the broker assigned but has not stored yet is missing for a moment only, however
    many quick reads see it missing."""
    if offset <= expected or (times > MAX_REREADS and seen_for_s >= BELIEVE_AFTER_S):
        return None
    return expected


@dataclass(frozen=True, slots=True)
class Jump:
    """A record read ahead of the expected offset: how often this same jump came in a row, since when."""

    expected: int
    offset: int
    times: int
    since: float

    @classmethod
    def sighted(cls, last: Jump | None, expected: int, offset: int, now: float) -> Jump:
        """This sighting, counted on from `last` when it is the same jump."""
        if last is not None and (last.expected, last.offset) == (expected, offset):
            return replace(last, times=last.times + 1)
        return cls(expected, offset, 1, now)

    def believed(self, now: float) -> bool:
        """The offsets before it are gone (`reread_from`): take the record and go on from it."""
        return reread_from(self.expected, self.offset, self.times, now - self.since) is None


class SequenceGuard:
    """Per partition, the offset the next record must have, for one consumer's reads.

    Made with the consumer's seek (`of` for a confluent-kafka consumer). Call `expect` wherever the
    reader places a partition (assign, seek); partitions placed at a logical offset other than the
    beginning (the end, a reset to latest) are checked from their first record on."""

    def __init__(
        self, seek: Seek, *, compacted: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._seek = seek
        self._compacted = compacted
        self._clock = clock
        self._expected: dict[Partition, int] = {}
        self._jumps: dict[Partition, Jump] = {}

    @classmethod
    def of(
        cls, consumer: Consumer, *, compacted: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> SequenceGuard:
        def seek(topic: str, partition: int, offset: int) -> None:
            consumer.seek(TopicPartition(topic, partition, offset))

        return cls(seek, compacted=compacted, clock=clock)

    def expect(self, topic: str, partition: int, offset: int) -> None:
        where = (topic, partition)
        self._jumps.pop(where, None)
        if offset >= 0 or offset == OFFSET_BEGINNING:
            self._expected[where] = max(offset, 0)
        else:
            self._expected.pop(where, None)

    def expect_all(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.expect(tp.topic, tp.partition, tp.offset)

    def reassigned(self, starts: Mapping[Partition, int]) -> None:
        """The consumer now reads exactly these partitions, each from its offset."""
        self._expected.clear()
        self._jumps.clear()
        for (topic, partition), offset in starts.items():
            self.expect(topic, partition, offset)

    def forget(self, tps: Iterable[Partition]) -> None:
        for where in tps:
            self._expected.pop(where, None)
            self._jumps.pop(where, None)

    def admit(self, messages: Iterable[Any]) -> list[Any]:
        """The confluent-kafka messages that continue their partitions, in order (errors and
        end-of-partition events pass through). After a skip the partition is sought back, and the
        rest of its messages in this batch are left out: they come again."""
        out = []
        rewound: set[Partition] = set()
        if self._compacted and not self._expected and not self._jumps:
            return list(messages)  # every start checked: nothing left to check
        for msg in messages:
            error = msg.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                out.append(msg)
                continue
            where = (msg.topic(), msg.partition())
            # An end-of-partition event carries the next offset: a client that skipped to the
            # end of a partition nobody writes any more shows only there.
            if where in rewound or not self._passes(where, msg.offset(), end=error is not None):
                rewound.add(where)
                continue
            out.append(msg)
        return out

    def admit_run(self, topic: str, partition: int, records: Sequence[R]) -> list[R]:
        """The leading records of one partition's run (aiokafka records: an `offset` attribute)
        that continue it; after a skip, none past it."""
        for taken, record in enumerate(records):
            if not self._passes((topic, partition), record.offset, end=False):
                return list(records[:taken])
        return list(records)

    def _passes(self, where: Partition, offset: int, *, end: bool) -> bool:
        """Whether the record at `offset` (with `end`, the end of the partition) continues it;
        if not, the partition is sought back to where it should continue."""
        expected = self._expected.get(where)
        if expected is not None and offset > expected and not self._believed(where, expected, offset):
            return False
        if self._compacted:
            self._expected.pop(where, None)
        elif end:  # (an end event never moves the expected offset back)
            self._expected[where] = max(offset, expected or 0)
        else:
            self._expected[where] = offset + 1
        return True

    def _believed(self, where: Partition, expected: int, offset: int) -> bool:
        now = self._clock()
        jump = Jump.sighted(self._jumps.get(where), expected, offset, now)
        if jump.believed(now):
            log.warning(
                "%s[%d]: offsets %d-%d missing on %d reads in %.1f s (retention, compaction...); going on",
                *where,
                expected,
                offset - 1,
                jump.times,
                now - jump.since,
            )
            self._jumps.pop(where, None)
            return True
        if jump.times == 1:
            log.warning(
                "%s[%d]: the client skipped offsets %d-%d; reading them", *where, expected, offset - 1
            )
        self._jumps[where] = jump
        self._seek(*where, expected)
        return False
