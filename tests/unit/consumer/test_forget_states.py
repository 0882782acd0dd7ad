"""A key that failed once does not keep its state for ever: the copy drops it (a tombstone in
`<name>-state`) once `forgettable` holds with the committed offsets. Checked in the simulated copy
with a crash at every crash-point hit (the tombstone's included), as the crash-point tests do:
forgetting keeps every promise, changes no delivery of a clean run, and adds no redelivery after a
crash; forgetting without waiting for the commits does add redeliveries, and the search sees them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from app.consumer.model import OnDlq
from app.consumer.queues import KafkaStateLog
from app.ordered.rules import (
    GroupState,
    MessageState,
    forgettable,
    on_dead_lettered,
    on_delivered,
    on_sidelined,
)
from tests.unit.consumer.sim import World, committed_rule, run, settings
from tests.unit.consumer.test_crash_points import SCENARIOS, SEEDS, check


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="app.consumer.engine")  # restored after each test


def _eager(state: GroupState, _main: int, _retry: int) -> bool:
    """Forgets as soon as the state is settled, whatever was committed."""
    return forgettable(state, (1 << 62, 0), (1 << 62, 0))


def _world(name: str, rule) -> World:  # type: ignore[no-untyped-def]
    main, answers = SCENARIOS[name]
    return World(main=list(main), answers=dict(answers), forget=rule)


def _redeliveries(rule, on_dlq: OnDlq) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(crashed runs, handler calls repeated) over one crash at every hit of every scenario and seed."""
    runs = repeated = 0
    for name in SCENARIOS:
        for seed in SEEDS:
            hits = run(_world(name, rule), on_dlq, seed).hits
            for n in range(1, hits + 1):
                world = _world(name, rule)
                world.crash_at = {n}
                check(run(world, on_dlq, seed), on_dlq)
                handled = [value for _, value in world.handled]
                runs += 1
                repeated += len(handled) - len(set(handled))
    return runs, repeated


@pytest.mark.parametrize("on_dlq", list(OnDlq))
def test_a_clean_run_delivers_the_same_and_keeps_no_state_of_keys_that_recovered(on_dlq: OnDlq) -> None:
    for name in SCENARIOS:
        for seed in SEEDS:
            kept = run(_world(name, None), on_dlq, seed)
            forgot = run(_world(name, committed_rule), on_dlq, seed)
            check(forgot, on_dlq)
            assert forgot.handled == kept.handled, f"{name}/{seed}: forgetting changed the deliveries"
            dead = {work.ordering_key for work, _ in forgot.dlq_log}
            left = {key for (_, key) in forgot.states.states}
            assert left == dead, f"{name}/{seed}: states left {left}, keys with dead letters {dead}"
            failed = {key for (_, key) in kept.states.states}
            assert forgot.forgotten >= len(failed - dead)  # a key may fail, recover and go twice


def test_a_key_that_recovered_from_a_retry_has_no_state_at_the_end() -> None:
    world = run(_world("transient", committed_rule), OnDlq.BLOCK_GROUP, 0)
    assert world.forgotten == 2  # keys a and b each failed once and then succeeded
    assert world.states.states == {}


@pytest.mark.parametrize("on_dlq", list(OnDlq))
def test_forgetting_adds_no_redelivery_at_any_crash_point(on_dlq: OnDlq) -> None:
    runs_kept, kept = _redeliveries(None, on_dlq)
    runs_forgot, forgot = _redeliveries(committed_rule, on_dlq)
    print(
        f"{on_dlq.value}: {runs_kept} runs keeping states, {runs_forgot} forgetting;"
        f" repeats {kept} / {forgot}"
    )
    assert runs_forgot > runs_kept  # the tombstones are crash points too
    assert forgot == kept


@pytest.mark.parametrize("on_dlq", list(OnDlq))
@pytest.mark.parametrize("name", ["one key", "transient"])
def test_two_crashes_at_every_pair_of_points_with_forgetting(name: str, on_dlq: OnDlq) -> None:
    hits = run(_world(name, committed_rule), on_dlq, 0).hits
    runs = 0
    for first, second in itertools.combinations(range(1, hits + 3), 2):
        world = _world(name, committed_rule)
        world.crash_at = {first, second}
        check(run(world, on_dlq, 0), on_dlq)
        runs += 1
    assert runs > 0


def test_the_search_sees_the_redeliveries_of_forgetting_before_the_commit() -> None:
    _, kept = _redeliveries(None, OnDlq.BLOCK_GROUP)
    _, eager = _redeliveries(_eager, OnDlq.BLOCK_GROUP)
    assert eager > kept


def test_a_state_is_kept_while_anything_of_its_group_may_come_again() -> None:
    failed = on_sidelined(None, (0, 5), MessageState.at((0, 5), (0, 3)), failed=True)
    assert not forgettable(failed, (0, 99), (0, 99))  # its copy waits in RQ
    recovered = on_delivered(failed, (0, 5), MessageState.at((0, 5), (0, 3)))
    assert recovered is not None
    assert forgettable(recovered, (0, 6), (0, 4))
    assert not forgettable(recovered, (0, 5), (0, 4))  # MQ may give offset 5 again
    assert not forgettable(recovered, (0, 6), (0, 3))  # RQ may give its copy again
    assert not forgettable(recovered, (0, 6), None)
    dead = on_dead_lettered(failed, (0, 5), MessageState.at((0, 5), (0, 0)), MessageState.at((0, 5), (0, 3)))
    assert not dead.rq.pending and dead.retry_head is None
    assert not forgettable(dead, (0, 99), (0, 99))  # a replay needs its DLQ consumption mark


class _Sent:
    """An AsyncProducer that keeps what it was asked to send."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, bytes | None, bytes | None]] = []

    async def send(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> None:
        self.records.append((topic, partition, key, value))


def test_the_state_log_rechecks_only_keys_written_since_they_were_judged_unsettled() -> None:
    sent = _Sent()
    states = KafkaStateLog(settings(OnDlq.BLOCK_GROUP), sent)  # type: ignore[arg-type]
    failed = on_sidelined(None, (0, 5), MessageState.at((0, 5), (0, 3)), failed=True)
    recovered = on_delivered(failed, (0, 5), MessageState.at((0, 5), (0, 3)))
    assert recovered is not None

    async def scenario() -> None:
        await states.put(0, "a", failed)
        await states.put(0, "b", recovered)
        assert sorted(states.to_check(0)) == ["a", "b"]
        states.checked(0, "a")  # "a" waits in RQ: not looked at again until its next write
        assert states.to_check(0) == ["b"]
        await states.drop(0, "b")
        assert states.get(0, "b") is None and states.to_check(0) == []
        await states.put(0, "a", recovered)
        assert states.to_check(0) == ["a"]

    asyncio.run(scenario())
    assert sent.records[-2] == ("sim-state", 0, b"b", None)  # the tombstone
