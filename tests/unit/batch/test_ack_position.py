"""The ack agent's own position per ack partition: records handled strictly in offset order from
it, a skipped record sought back (whatever the consumer's committed offset says), a stalled
partition sought back by the watchdog, the position written forward only. A jump that keeps coming
back after the seeks (retention took the records) is believed, by the readers' common rule."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from app.batch.ack_position import (
    RESEEK_AFTER_S,
    STALLED_AFTER_S,
    AckCursor,
    Verdict,
    read_position,
    write_position,
)
from app.batch.ack_stream import AckPositions
from app.batch.errors import PartitionNotReady
from app.batch.model import BatchStore
from app.kafka.sequence import BELIEVE_AFTER_S, MAX_REREADS
from tests.unit.batch.conftest import MemoryStore

T = TypeVar("T")


def test_the_position_moves_forward_only(store: MemoryStore) -> None:
    assert read_position(store) is None
    write_position(store, 7)
    write_position(store, 3)
    assert read_position(store) == 7
    write_position(store, 9)
    assert read_position(store) == 9


def test_cursor_verdicts() -> None:
    cursor = AckCursor(expected=5, last_progress=0.0)
    assert cursor.admit(4, 1.0) is Verdict.SEEN
    assert cursor.admit(6, 1.0) is Verdict.SEEK
    assert cursor.admit(7, 2.0) is Verdict.WAIT, "a seek back is under way"
    assert cursor.admit(7, 1.0 + RESEEK_AFTER_S) is Verdict.SEEK, "it brought nothing: again"
    assert cursor.admit(5, 7.0) is Verdict.HANDLE
    cursor.handled(5, 7.0)
    assert cursor.admit(6, 7.0) is Verdict.HANDLE


def test_cursor_stalls_only_with_records_left_and_no_progress() -> None:
    cursor = AckCursor(expected=5, last_progress=0.0)
    assert not cursor.stalled(5, 100.0), "nothing left"
    assert not cursor.stalled(9, STALLED_AFTER_S - 1), "progress was recent"
    assert cursor.stalled(9, STALLED_AFTER_S)
    assert not cursor.stalled(9, STALLED_AFTER_S + 1), "the seek back is given time"


def test_a_jump_that_keeps_coming_back_is_believed() -> None:
    """The stored position is 5 and retention took offsets 5-9: every seek back lands on 10. Before
    the common rule the cursor sought back forever and the partition's acks were never handled."""
    cursor = AckCursor(expected=5, last_progress=0.0)
    now = 0.0
    verdicts = []
    for _ in range(MAX_REREADS + 1):
        now += RESEEK_AFTER_S
        verdicts.append(cursor.admit(10, now))
    assert verdicts == [Verdict.SEEK] * MAX_REREADS + [Verdict.HANDLE]
    cursor.handled(10, now)
    assert cursor.admit(11, now) is Verdict.HANDLE


def test_another_record_ahead_starts_the_count_again() -> None:
    cursor = AckCursor(expected=5, last_progress=0.0)
    now = 0.0
    for _ in range(MAX_REREADS):
        now += RESEEK_AFTER_S
        assert cursor.admit(10, now) is Verdict.SEEK
    now += RESEEK_AFTER_S
    assert cursor.admit(12, now) is Verdict.SEEK, "a different jump: seen once"
    now += RESEEK_AFTER_S
    assert cursor.admit(5, now) is Verdict.HANDLE, "the seek back found the record"


def test_handled_offsets_follow_the_position() -> None:
    """Exhaustive: every delivery sequence of up to 6 records over offsets 0-4, from every position
    0-2, with deliveries 1 s or RESEEK_AFTER_S apart (over 110,000 sequences)."""
    cases = 0
    for length in range(1, 7):
        for deliveries in itertools.product(range(5), repeat=length):
            for start in range(3):
                for step_s in (1.0, RESEEK_AFTER_S):
                    check_deliveries(deliveries, start, step_s)
                    cases += 1
    assert cases > 110_000


def check_deliveries(deliveries: Sequence[int], start: int, step_s: float) -> None:
    """Whatever order, repeats and holes the consumer delivers in, what is handled is increasing
    from start, each offset once. A hole is sought back, and handled past only when the same record
    ahead was judged more than MAX_REREADS times in a row over at least BELIEVE_AFTER_S."""
    cursor = AckCursor(expected=start, last_progress=0.0)
    handled: list[int] = []
    run: tuple[int, list[float]] | None = None  # the record ahead judged in a row, and when
    now = 0.0
    for offset in deliveries:
        now += step_s
        expected = cursor.expected
        verdict = cursor.admit(offset, now)
        if offset <= expected:
            assert verdict is (Verdict.HANDLE if offset == expected else Verdict.SEEN)
        elif verdict is not Verdict.WAIT:
            run = (offset, [*run[1], now]) if run and run[0] == offset else (offset, [now])
            times = run[1]
            believed = len(times) > MAX_REREADS and times[-1] - times[0] >= BELIEVE_AFTER_S
            assert verdict is (Verdict.HANDLE if believed else Verdict.SEEK)
        if verdict is Verdict.HANDLE:
            cursor.handled(offset, now)
            handled.append(offset)
            run = None
    assert handled == sorted(set(handled))
    assert not handled or handled[0] >= start


@dataclass
class FakePartitions:
    """The batch service's partition side: a memory store per served partition."""

    ready: set[int]
    revocations: int = 0
    stores: dict[int, MemoryStore] = field(default_factory=dict)

    def run(self, partition: int, operation: Callable[[BatchStore], T]) -> T:
        if partition not in self.ready:
            raise PartitionNotReady(f"partition {partition} not served")
        return operation(self.stores.setdefault(partition, MemoryStore()))


@dataclass
class Consumer:
    committed: dict[int, int]
    ends: dict[int, int]
    seeks: list[tuple[int, int]] = field(default_factory=list)

    async def seek(self, partition: int, offset: int) -> bool:
        self.seeks.append((partition, offset))
        return True


def positions(parts: FakePartitions, consumer: Consumer, clock: list[float]) -> AckPositions:
    return AckPositions(
        parts,
        consumer.seek,
        lambda ps: [consumer.committed.get(p, 0) for p in ps],
        lambda ps: [consumer.ends[p] for p in ps],
        clock=lambda: clock[0],
    )


async def test_a_record_the_consumer_skipped_is_sought_back_and_handled_first() -> None:
    """The reproduced loss: offset 0 dropped at a rebalance, offset 1 delivered and committed."""
    parts, consumer, clock = FakePartitions({1}), Consumer({1: 0}, {1: 2}), [0.0]
    acks = positions(parts, consumer, clock)
    assert not await acks.admit(1, 1)
    assert consumer.seeks == [(1, 0)]
    assert await acks.admit(1, 0)
    acks.handled(1, 0)
    assert await acks.admit(1, 1)
    acks.handled(1, 1)
    acks.save()
    assert read_position(parts.stores[1]) == 2


async def test_the_stored_position_wins_over_the_consumer_groups_commit() -> None:
    """Restarted after Faust committed past records the table never had: read again from the
    table's position."""
    parts, consumer, clock = FakePartitions({0}), Consumer({0: 40}, {0: 41}), [0.0]
    write_position(parts.stores.setdefault(0, MemoryStore()), 37)
    acks = positions(parts, consumer, clock)
    assert not await acks.admit(0, 40)
    assert consumer.seeks == [(0, 37)]
    assert not await acks.admit(0, 36), "handled before the restart"


async def test_a_partition_not_served_here_is_handled_as_before() -> None:
    parts, consumer, clock = FakePartitions(set()), Consumer({}, {}), [0.0]
    acks = positions(parts, consumer, clock)
    assert await acks.admit(3, 9), "the record takes the not-ready path (wait or re-queue)"
    acks.handled(3, 9)
    acks.save()
    assert consumer.seeks == [] and parts.stores == {}


async def test_a_rebalance_forgets_cursors_and_resumes_from_the_table() -> None:
    parts, consumer, clock = FakePartitions({0}), Consumer({0: 0}, {0: 5}), [0.0]
    acks = positions(parts, consumer, clock)
    for offset in range(3):
        assert await acks.admit(0, offset)
        acks.handled(0, offset)
    acks.save()
    parts.revocations += 1  # revoked and given back: the table is what counts
    assert not await acks.admit(0, 4)
    assert consumer.seeks == [(0, 3)]


async def test_the_watchdog_seeks_back_a_partition_whose_last_records_never_came() -> None:
    parts, consumer, clock = FakePartitions({2}), Consumer({2: 0}, {2: 1}), [0.0]
    acks = positions(parts, consumer, clock)
    assert await acks.admit(2, 0)
    acks.handled(2, 0)
    consumer.ends[2] = 3  # offsets 1 and 2 written, never delivered
    clock[0] = STALLED_AFTER_S - 0.1
    await acks.watch()
    assert consumer.seeks == []
    clock[0] = STALLED_AFTER_S + 0.1
    await acks.watch()
    assert consumer.seeks == [(2, 1)]
    assert acks.sought == 1


async def test_the_watchdog_probes_end_offsets_only_for_quiet_partitions() -> None:
    parts, clock = FakePartitions({0}), [0.0]
    probed: list[list[int]] = []

    def ends(ps: list[int]) -> list[int]:
        probed.append(ps)
        return [1 for _ in ps]

    acks = AckPositions(
        parts, Consumer({0: 0}, {}).seek, lambda ps: [0 for _ in ps], ends, clock=lambda: clock[0]
    )
    assert await acks.admit(0, 0)
    acks.handled(0, 0)
    clock[0] = STALLED_AFTER_S / 2
    await acks.watch()
    assert probed == [], "a partition handling records costs no probe"
    clock[0] = STALLED_AFTER_S + 1
    await acks.watch()
    assert probed == [[0]]
