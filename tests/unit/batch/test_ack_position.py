"""The ack agent's own position per ack partition, kept in the batch table (`AckTable` under
`app.kafka.in_order.InOrderPositions`): a skipped record sought back whatever the consumer's
committed offset says, a stalled partition sought back by the watchdog, the position written
forward only. The rule for one partition is checked in tests/unit/kafka/test_in_order.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from app.batch.ack_position import AckTable, read_position, write_position
from app.batch.errors import PartitionNotReady
from app.batch.model import BatchStore
from app.errors import ServiceUnavailable
from app.kafka.in_order import STALLED_AFTER_S, InOrderPositions
from tests.unit.batch.conftest import MemoryStore

T = TypeVar("T")


def test_the_position_moves_forward_only(store: MemoryStore) -> None:
    assert read_position(store) is None
    write_position(store, 7)
    write_position(store, 3)
    assert read_position(store) == 7
    write_position(store, 9)
    assert read_position(store) == 9


@dataclass
class FakePartitions:
    """The batch service's partition side: a memory store per served partition."""

    ready: set[int]
    revocations: int = 0
    stores: dict[int, MemoryStore] = field(default_factory=dict)

    def serving(self, partition: int) -> bool:
        return partition in self.ready

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


def positions(parts: FakePartitions, consumer: Consumer, clock: list[float]) -> InOrderPositions:
    return InOrderPositions(
        "acks",
        AckTable(parts),
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

    acks = InOrderPositions(
        "acks",
        AckTable(parts),
        Consumer({0: 0}, {}).seek,
        lambda ps: [0 for _ in ps],
        ends,
        clock=lambda: clock[0],
    )
    assert await acks.admit(0, 0)
    acks.handled(0, 0)
    clock[0] = STALLED_AFTER_S / 2
    await acks.watch()
    assert probed == [], "a partition handling records costs no probe"
    clock[0] = STALLED_AFTER_S + 1
    await acks.watch()
    assert probed == [[0]]


async def test_the_watchdog_seeks_back_a_partition_whose_only_records_never_came() -> None:
    """No record of partition 4 ever reached the agent (the consumer started past them): there is
    no record to notice the hole by, so the watchdog makes the partition's cursor itself."""
    parts, consumer, clock = FakePartitions({4}), Consumer({4: 0}, {4: 2}), [0.0]
    acks = positions(parts, consumer, clock)
    await acks.watch()
    assert consumer.seeks == []
    clock[0] = STALLED_AFTER_S + 0.1
    await acks.watch()
    assert consumer.seeks == [(4, 0)]
    assert await acks.admit(4, 0)


async def test_a_served_partition_with_nothing_left_is_not_sought() -> None:
    parts, consumer, clock = FakePartitions({4}), Consumer({4: 2}, {4: 2}), [0.0]
    acks = positions(parts, consumer, clock)
    await acks.watch()
    clock[0] = STALLED_AFTER_S * 3
    await acks.watch()
    assert consumer.seeks == []


async def test_the_watchdog_outlasts_a_broker_that_does_not_answer_and_seeks_once_it_does() -> None:
    """A broker restart: the end-offset probe fails (ServiceUnavailable, as the broker port
    promises); the watch gives up that round instead of ending the worker, and seeks next round."""
    parts, consumer, clock = FakePartitions({2}), Consumer({2: 0}, {2: 3}), [0.0]
    away = [True]

    def ends(ps: list[int]) -> list[int]:
        if away[0]:
            raise ServiceUnavailable("end offsets of [('acks', 2)] not known: transport failure")
        return [consumer.ends[p] for p in ps]

    acks = InOrderPositions(
        "acks", AckTable(parts), consumer.seek, lambda ps: [0 for _ in ps], ends, clock=lambda: clock[0]
    )
    assert await acks.admit(2, 0)
    acks.handled(2, 0)
    clock[0] = STALLED_AFTER_S + 0.1
    await acks.watch()
    assert consumer.seeks == []
    away[0] = False
    await acks.watch()
    assert consumer.seeks == [(2, 1)]


async def test_the_watchdog_outlasts_a_resume_offset_the_broker_does_not_answer() -> None:
    """A partition served here with no record yet: the watch asks where the group resumes it. A
    worker resumed after a pause found that probe timed out (ServiceUnavailable), and the timer
    ended the worker; the round is given up instead, and the next one makes the cursor."""
    parts, consumer, clock = FakePartitions({4}), Consumer({4: 0}, {4: 2}), [0.0]
    away = [True]

    def resume(ps: list[int]) -> list[int]:
        if away[0]:
            raise ServiceUnavailable("start offsets of [('acks', 4)] not known after 10 s")
        return [consumer.committed.get(p, 0) for p in ps]

    acks = InOrderPositions(
        "acks",
        AckTable(parts),
        consumer.seek,
        resume,
        lambda ps: [consumer.ends[p] for p in ps],
        clock=lambda: clock[0],
    )
    await acks.watch()
    away[0] = False
    await acks.watch()
    clock[0] = STALLED_AFTER_S + 0.1
    await acks.watch()
    assert consumer.seeks == [(4, 0)]
