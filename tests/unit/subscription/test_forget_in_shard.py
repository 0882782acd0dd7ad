"""Which settled states a shard forgets after a commit, judged against its committed offsets and
the storage topics it reads (ShardRunner._forget_settled on in-memory states; no broker)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition

from app.composite.model import CompositeTopic, StorageTopic
from app.composite.routing import partition_for
from app.ordered.policy import OnDlq
from app.ordered.rules import Action, GroupState, MessageState, decide_retry, on_delivered, on_sidelined
from app.settings import Settings
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.runner import ShardRunner
from tests.support.waiting import async_wait_until

OLD, NEW = 0, 1  # storage topic indexes: before and after a shard-count change
SUB = Subscription("s", "mq", EndpointSpec("callable", "x"))


def _topic(name: str) -> CompositeTopic:
    storages = (StorageTopic(f"{name}.0", 2), StorageTopic(f"{name}.1", 4))
    return CompositeTopic(name, storages, produce_pointer=NEW)


class Definitions:
    """The metadata store, as the runner reads it: both queues have two storage topics."""

    def get(self, name: str) -> CompositeTopic:
        return _topic(name)


def _runner(states: MemoryStates) -> ShardRunner:
    runner = ShardRunner(Settings(), SUB, 0, states, None, Definitions())  # type: ignore[arg-type]
    runner.mq.idx = runner.rq.idx = NEW
    for name in ("mq", SUB.rq_topic):  # every partition of the topics read committed far ahead
        for p in range(4):
            runner._committed[TopicPartition(f"{name}.1", p)] = 1_000
    return runner


def _commit_rq(runner: ShardRunner, group: str, offset: int) -> None:
    """The shard committed `offset` on `group`'s partition of the RQ storage topic it reads."""
    storage = _topic(SUB.rq_topic).storage_topics[NEW]
    runner._committed[TopicPartition(storage.name, partition_for(group, storage.partitions, 1))] = offset


def _delivered(state: GroupState | None, main: tuple[int, int], at: tuple[int, int]) -> GroupState:
    new = on_delivered(state, main, MessageState.at(main, at))
    assert new is not None
    return new


def _recovered_through(rq_at: int) -> GroupState:
    """A group whose message (MQ storage 1, offset 3) failed once and went through from RQ
    storage topic `rq_at` (offset 10): nothing waits, nothing dead-lettered."""
    state = on_sidelined(None, (NEW, 3), MessageState.at((NEW, 3), (rq_at, 10)), failed=True)
    return _delivered(state, (NEW, 3), (rq_at, 10))


async def test_a_group_recovered_behind_the_committed_offsets_is_forgotten() -> None:
    states = MemoryStates()
    states.put("g", _recovered_through(NEW))
    runner = _runner(states)
    await runner._forget_settled()
    assert states.get("g") is None and runner.stats.forgotten == 1


async def test_a_group_whose_marks_the_commits_have_not_passed_keeps_its_state() -> None:
    states = MemoryStates()
    states.put("g", _recovered_through(NEW))
    runner = _runner(states)
    _commit_rq(runner, "g", 10)
    await runner._forget_settled()
    assert states.get("g") is not None and runner.stats.forgotten == 0
    assert states.to_check() == ["g"]  # judged again after the next commit


async def test_a_mark_in_an_earlier_mq_storage_topic_has_passed() -> None:
    states = MemoryStates()
    state = on_sidelined(None, (OLD, 3), MessageState.at((OLD, 3), (NEW, 10)), failed=True)
    states.put("g", _delivered(state, (OLD, 3), (NEW, 10)))  # MQ storage 0 was left drained
    runner = _runner(states)
    await runner._forget_settled()
    assert states.get("g") is None


async def test_a_group_recovered_through_fed_copies_keeps_its_state_until_they_are_passed() -> None:
    """Its consumed mark is its copy's place in the old RQ storage topic: a copy fed twice (a
    feeder cut and restarted) may still wait in the new one above the committed offset, and only
    that mark skips it. Forgotten then, the group delivered it again after its later messages."""
    states = MemoryStates()
    states.put("g", _recovered_through(OLD))
    runner = _runner(states)
    runner._fed_below = (NEW, [1_001] * 4)  # fed copies may lie up to offset 1,000
    await runner._forget_settled()
    kept = states.get("g")
    assert kept is not None and runner.stats.forgotten == 0
    assert decide_retry(kept, (NEW, 3), (OLD, 10), OnDlq.BLOCK_GROUP) is Action.SKIP
    assert states.to_check() == ["g"]  # judged again after the next commit
    _commit_rq(runner, "g", 1_001)
    await runner._forget_settled()
    assert states.get("g") is None and runner.stats.forgotten == 1


async def test_fed_copies_are_passed_once_the_shard_reads_a_later_rq_storage_topic() -> None:
    states = MemoryStates()
    states.put("g", _recovered_through(OLD))
    runner = _runner(states)
    runner._fed_below = (OLD, [5_000] * 2)  # the copies went to a storage topic left since
    await runner._forget_settled()
    assert states.get("g") is None


async def test_nothing_is_forgotten_while_old_rq_partitions_are_fed() -> None:
    states = MemoryStates()
    states.put("g", _recovered_through(NEW))
    runner = _runner(states)
    runner._feed_all = [TopicPartition(f"{SUB.rq_topic}.0", 0)]
    await runner._forget_settled()
    assert states.get("g") is not None


async def test_where_fed_copies_end_is_dated_only_once_replaced_feeders_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A feeder replaced while it ran may have handed copies to its producer, which delivers them
    until their delivery timeout: the end offsets are read only SUBSCRIPTION_FED_SETTLE_S after
    feeding was first seen over, and until then the state is kept and judged again."""
    asked: list[tuple[float, list[tuple[str, int]]]] = []

    def ends(places: list[tuple[str, int]]) -> list[int]:
        asked.append((time.monotonic(), places))
        return [500] * len(places)

    states = MemoryStates()
    states.put("g", _recovered_through(OLD))
    runner = _runner(states)
    monkeypatch.setattr(runner, "broker", SimpleNamespace(end_offsets=ends))
    runner.settings = Settings(subscription_fed_settle_s=0.5)
    first = time.monotonic()
    await runner._forget_settled()
    assert states.get("g") is not None and states.to_check() == ["g"] and asked == []

    async def forgotten() -> bool:
        await runner._forget_settled()  # as after each commit
        return states.get("g") is None  # committed at 1,000, past the end of 500

    await async_wait_until(forgotten, 10, "the state forgotten once the settle time passed", poll_s=0.05)
    assert len(asked) == 1 and asked[0][0] - first >= 0.5
    assert asked[0][1] == [(f"{SUB.rq_topic}.1", p) for p in range(4)]  # the RQ topic at the pointer
