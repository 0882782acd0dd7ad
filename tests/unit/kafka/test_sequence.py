"""The sequence guard against a client that skips records (app.kafka.sequence).

Exhaustive up to a bound: every log of up to 5 offsets with every set of offsets compacted away,
every start the log has (retention), every offset a read is placed at, every offset the client
starts the partition at instead, and every later skip it makes mid-read. The reader must see
every record the log holds from where it was placed, in order, each once (a skip to the very end
shows in the client's end-of-partition event); a guard for compacted topics repairs only the
start (where the skip was seen), so it reads gaps after the first record once."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition

from app.kafka.sequence import BELIEVE_AFTER_S, MAX_REREADS, SequenceGuard, reread_from

TOPIC = "t"
LENGTH = 5  # offsets 0..4


class Clock:
    """Time that moves `step` seconds each time it is read."""

    def __init__(self, step: float = 0.4) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class EndOfPartition:
    def code(self) -> int:
        return int(KafkaError._PARTITION_EOF)


@dataclass
class Record:
    """A record, or with `eof` the client's end-of-partition event (it carries the next offset)."""

    _offset: int
    eof: bool = False

    def error(self) -> EndOfPartition | None:
        return EndOfPartition() if self.eof else None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


@dataclass
class SkippingClient:
    """One partition of a log: `held` offsets have records, the first kept is `low`. The client
    starts at `start` whatever it was asked for, once, and jumps from `skip[0]` to `skip[1]` once.
    At the end of the log it reports the end, as librdkafka does with enable.partition.eof."""

    held: list[int]
    low: int
    start: int | None = None
    skip: tuple[int, int] | None = None
    position: int = 0
    seeks: list[int] = field(default_factory=list)

    def assign_at(self, offset: int) -> None:
        self.position = self.start if self.start is not None else offset
        self.start = None

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append(tp.offset)
        self.position = tp.offset

    def consume(self, count: int, timeout: float) -> list[Record]:
        out: list[Record] = []
        ahead = [o for o in self.held if o >= max(self.position, self.low)]  # (below low: reset)
        for offset in ahead[:count]:
            if self.skip is not None and offset >= self.skip[0]:
                self.position = self.skip[1]
                self.skip = None
                return out
            out.append(Record(offset))
            self.position = offset + 1
        if len(ahead) <= count:
            self.position = LENGTH
            out.append(Record(LENGTH, eof=True))
        return out


def read(client: SkippingClient, guard: SequenceGuard, count: int) -> list[int]:
    seen: list[int] = []
    for _ in range(8 * LENGTH):
        seen += [msg.offset() for msg in guard.admit(client.consume(count, 0)) if msg.error() is None]
    return seen


def logs() -> list[tuple[list[int], int]]:
    """(offsets holding records, first offset kept) for every compaction and retention."""
    out = []
    for low in range(LENGTH + 1):
        for kept in itertools.product([True, False], repeat=LENGTH - low):
            out.append(([o for o, k in zip(range(low, LENGTH), kept, strict=True) if k], low))
    return out


def expected_records(held: list[int], low: int, placed: int) -> list[int]:
    return [o for o in held if o >= max(low, placed)]


@pytest.mark.parametrize("count", [1, 3])
def test_every_record_is_read_once_in_order_whatever_the_client_skips(count: int) -> None:
    cases = 0
    for held, low in logs():
        for placed in range(LENGTH + 1):
            starts = [None, *range(placed + 1, LENGTH + 1)]
            skips = [None, *((a, b) for a in range(placed, LENGTH) for b in range(a + 1, LENGTH + 1))]
            for start, skip in itertools.product(starts, skips):
                client = SkippingClient(held, low, start, skip)
                guard = SequenceGuard.of(client, clock=Clock())  # type: ignore[arg-type]
                client.assign_at(placed)
                guard.expect(TOPIC, 0, placed)
                seen = read(client, guard, count)
                assert seen == expected_records(held, low, placed), (held, low, placed, start, skip)
                cases += 1
    assert cases > 10_000


def test_a_compaction_gap_is_read_again_only_up_to_the_bound() -> None:
    client = SkippingClient(held=[0, 3, 4], low=0)
    guard = SequenceGuard.of(client, clock=Clock())  # type: ignore[arg-type]
    client.assign_at(0)
    guard.expect(TOPIC, 0, 0)
    assert read(client, guard, 10) == [0, 3, 4]
    assert client.seeks == [1] * MAX_REREADS


def test_the_compacted_guard_repairs_a_skipped_start_and_believes_gaps_after_it() -> None:
    for held, low in logs():
        for placed in range(LENGTH + 1):
            for start in [None, *range(placed + 1, LENGTH + 1)]:
                client = SkippingClient(held, low, start)
                guard = SequenceGuard.of(client, compacted=True, clock=Clock())  # type: ignore[arg-type]
                client.assign_at(placed)
                guard.expect(TOPIC, 0, placed)
                assert read(client, guard, 2) == expected_records(held, low, placed)
                # Only the first record (or the end) is checked: the gap before it is read again
                # up to the bound, plus the one seek back to where the read was placed.
                first = next(iter(expected_records(held, low, placed)), LENGTH)
                assert len(client.seeks) <= (MAX_REREADS + 1 if first > placed else 0) + (start is not None)


def test_retention_that_took_part_of_the_skipped_range_reads_the_rest() -> None:
    # Asked from 0, the client started at 4; retention has taken 0..1 only: 2 and 3 are read. The
    # guard never asks where the log starts (the embedded broker's answer is what was wrong): the
    # client's reset brings it back to 2 until the guard believes that jump.
    client = SkippingClient(held=[2, 3, 4], low=2, start=4)
    guard = SequenceGuard.of(client, clock=Clock())  # type: ignore[arg-type]
    client.assign_at(0)
    guard.expect(TOPIC, 0, 0)
    assert read(client, guard, 10) == [2, 3, 4]
    assert client.seeks == [0] * (1 + MAX_REREADS)


def test_partitions_placed_at_their_end_are_checked_from_their_first_record() -> None:
    client = SkippingClient(held=[0, 1, 2, 3, 4], low=0, skip=(2, 4))
    guard = SequenceGuard.of(client, clock=Clock())  # type: ignore[arg-type]
    client.assign_at(1)
    guard.expect(TOPIC, 0, OFFSET_END)
    assert read(client, guard, 10) == [1, 2, 3, 4]
    assert client.seeks == [2]


def test_the_beginning_is_offset_zero_and_forgotten_partitions_are_not_checked() -> None:
    client = SkippingClient(held=[0, 1, 2, 3, 4], low=0, start=3)
    guard = SequenceGuard.of(client, clock=Clock())  # type: ignore[arg-type]
    client.assign_at(OFFSET_BEGINNING)
    guard.expect_all([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    assert read(client, guard, 10) == [0, 1, 2, 3, 4]

    unchecked = SkippingClient(held=[0, 1, 2, 3, 4], low=0, start=3)
    guard = SequenceGuard.of(unchecked, clock=Clock())  # type: ignore[arg-type]
    guard.expect(TOPIC, 0, 0)
    guard.forget([(TOPIC, 0)])
    unchecked.assign_at(0)
    assert read(unchecked, guard, 10) == [3, 4]
    assert unchecked.seeks == []


@pytest.mark.parametrize(
    ("expected", "offset", "times", "seen_for_s", "answer"),
    [
        (5, 5, 1, 0.0, None),  # in sequence
        (5, 3, 1, 0.0, None),  # read again after a seek back
        (5, 9, 1, 0.0, 5),  # skipped: read 5..8 again
        (5, 9, MAX_REREADS, BELIEVE_AFTER_S, 5),
        (5, 9, MAX_REREADS + 1, 0.1, 5),  # often, but only for a moment: a batch not stored yet
        (5, 9, MAX_REREADS + 1, BELIEVE_AFTER_S, None),  # the same jump all along: no records there
    ],
)
def test_reread_from(expected: int, offset: int, times: int, seen_for_s: float, answer: int | None) -> None:
    assert reread_from(expected, offset, times, seen_for_s) == answer


@dataclass
class LateBatchClient(SkippingClient):
    """Offset 0's batch is stored only after `late_for` reads; until then a read from 0 finds 1.."""

    late_for: int = 0

    def consume(self, count: int, timeout: float) -> list[Record]:
        if self.late_for > 0:
            self.late_for -= 1
            self.held = [o for o in self.held if o != 0]
        elif 0 not in self.held:
            self.held = [0, *self.held]
        return super().consume(count, timeout)


def test_a_batch_stored_late_is_waited_for_however_many_quick_reads_miss_it() -> None:
    client = LateBatchClient(held=[0, 1, 2, 3, 4], low=0, late_for=10 * MAX_REREADS)
    guard = SequenceGuard.of(client, clock=Clock(step=0.01))  # type: ignore[arg-type]
    client.assign_at(0)
    guard.expect(TOPIC, 0, 0)
    seen: list[int] = []
    for _ in range(20 * MAX_REREADS):
        seen += [m.offset() for m in guard.admit(client.consume(10, 0)) if m.error() is None]
    assert seen == [0, 1, 2, 3, 4]
    assert len(client.seeks) > MAX_REREADS


def test_a_skip_sends_back_only_its_own_partition_in_a_mixed_batch() -> None:
    seeks: list[tuple[str, int, int]] = []
    guard = SequenceGuard(
        lambda topic, partition, offset: seeks.append((topic, partition, offset)), clock=Clock()
    )

    @dataclass
    class Mixed(Record):
        _partition: int = 0

        def partition(self) -> int:
            return self._partition

    guard.expect(TOPIC, 0, 0)
    guard.expect(TOPIC, 1, 5)
    batch = [Mixed(0, _partition=0), Mixed(7, _partition=1), Mixed(1, _partition=0), Mixed(8, _partition=1)]
    assert [(m.partition(), m.offset()) for m in guard.admit(batch)] == [(0, 0), (0, 1)]
    assert seeks == [(TOPIC, 1, 5)]


def test_an_end_event_below_the_expected_offset_does_not_move_it_back() -> None:
    client = SkippingClient(held=[0, 1, 2, 3, 4], low=0)
    guard = SequenceGuard.of(client, clock=Clock())  # type: ignore[arg-type]
    guard.expect(TOPIC, 0, 3)
    assert guard.admit([Record(2, eof=True)]) != []
    client.assign_at(3)
    assert read(client, guard, 10) == [3, 4]
    assert client.seeks == []


@dataclass
class Run:
    offset: int  # an aiokafka record: the offset is an attribute


def test_runs_of_records_stop_at_a_skip_and_continue_after_the_seek_back() -> None:
    seeks: list[tuple[str, int, int]] = []
    guard = SequenceGuard(
        lambda topic, partition, offset: seeks.append((topic, partition, offset)), clock=Clock()
    )
    guard.expect(TOPIC, 0, 0)
    assert guard.admit_run(TOPIC, 0, [Run(0), Run(1), Run(4), Run(5)]) == [Run(0), Run(1)]
    assert seeks == [(TOPIC, 0, 2)]
    assert guard.admit_run(TOPIC, 0, [Run(2), Run(3), Run(4)]) == [Run(2), Run(3), Run(4)]
    assert guard.admit_run(TOPIC, 1, [Run(7)]) == [Run(7)]  # never placed: checked from here on
    assert guard.admit_run(TOPIC, 1, [Run(9)]) == []
    assert seeks[-1] == (TOPIC, 1, 8)
