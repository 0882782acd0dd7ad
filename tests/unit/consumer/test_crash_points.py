"""The library's engine, offset tracker and key lanes, crashed at every crash point it passes.

For each scenario (keys x messages x scripted handler answers), DLQ policy and scheduler seed,
the run is repeated with one crash at each crash-point hit in turn (every position, not a
sample), and with two crashes at every pair of positions for the smaller scenarios. After the
restarts: every message was handled or dead-lettered; per key, the handled messages are in
offset order; with BLOCK_GROUP nothing after a key's dead-lettered message was handled; without
a crash nothing was handled twice.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from app.consumer.model import OnDlq
from tests.unit.consumer.sim import FATAL, RETRY, World, run

SCENARIOS = {
    "transient": ([("a", 0), ("b", 1), ("a", 2), ("b", 3), ("a", 4)], {(0, 1): RETRY, (3, 1): RETRY}),
    "exhausted": ([("a", 0), ("a", 1), ("b", 2), ("a", 3)], {(0, 1): RETRY, (0, 2): RETRY, (0, 3): RETRY}),
    "fatal": ([("a", 0), ("b", 1), ("a", 2), ("a", 3), ("b", 4)], {(2, 1): FATAL, (1, 1): RETRY}),
    "one key": ([("a", 0), ("a", 1), ("a", 2)], {(0, 1): RETRY, (1, 1): RETRY, (1, 2): RETRY}),
}
SEEDS = range(6)


def check(world: World, on_dlq: OnDlq) -> None:
    keys = dict(world.main)
    key_of = {value: key for key, value in world.main}
    dead = [int(work.record.value or b"0") for work, _ in world.dlq_log]
    handled = [value for _, value in world.handled]
    assert set(handled) | set(dead) == {value for _, value in world.main}, "a message was lost"
    if world.crashes == 0:
        assert len(handled) == len(set(handled)), f"handled twice without a crash: {handled}"
        assert len(dead) == len(set(dead)), f"dead-lettered twice without a crash: {dead}"
    firsts: dict[str, list[int]] = defaultdict(list)
    for key, value in world.handled:
        if value not in firsts[key]:
            firsts[key].append(value)
    for key, values in firsts.items():
        assert values == sorted(values), f"key {key} handled out of order: {values}"
    if on_dlq is OnDlq.BLOCK_GROUP:
        for value in set(dead):
            later = [v for v in handled if key_of[v] == key_of[value] and v > value]
            assert not later, f"key {key_of[value]}: {later} handled after {value} was dead-lettered"
    assert keys  # the scenario had messages


def _world(name: str) -> World:
    main, answers = SCENARIOS[name]
    return World(main=list(main), answers=dict(answers))


def _hits(name: str, on_dlq: OnDlq, seed: int) -> int:
    return run(_world(name), on_dlq, seed).hits


@pytest.mark.parametrize("on_dlq", list(OnDlq))
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_one_crash_at_every_point(name: str, on_dlq: OnDlq) -> None:
    runs = 0
    for seed in SEEDS:
        clean = run(_world(name), on_dlq, seed)
        check(clean, on_dlq)
        for n in range(1, clean.hits + 1):
            world = _world(name)
            world.crash_at = {n}
            check(run(world, on_dlq, seed), on_dlq)
            runs += 1
    assert runs >= len(SEEDS) * len(SCENARIOS[name][0])  # every message passes at least one point
    print(f"{name}/{on_dlq.value}: {runs} crashed runs over {len(SEEDS)} schedules")


@pytest.mark.parametrize("on_dlq", list(OnDlq))
@pytest.mark.parametrize("name", ["one key", "exhausted"])
def test_two_crashes_at_every_pair_of_points(name: str, on_dlq: OnDlq) -> None:
    hits = _hits(name, on_dlq, 0)
    runs = 0
    for first, second in itertools.combinations(range(1, hits + 3), 2):
        world = _world(name)
        world.crash_at = {first, second}
        check(run(world, on_dlq, 0), on_dlq)
        runs += 1
    assert runs > 0
    print(f"{name}/{on_dlq.value}: {runs} runs with two crashes")


def test_finished_offsets_in_commit_metadata_cut_the_duplicates() -> None:
    """The same crashes with the commits' metadata kept and dropped (a broker that does not return
    it): the promise holds either way, and the finished offsets it records are not handled again."""
    duplicates = {True: 0, False: 0}
    for keep in (True, False):
        for name in SCENARIOS:
            for seed in SEEDS:
                hits = run(_world(name), OnDlq.BLOCK_GROUP, seed).hits
                for n in range(1, hits + 1):
                    world = _world(name)
                    world.crash_at, world.keep_metadata = {n}, keep
                    check(run(world, OnDlq.BLOCK_GROUP, seed), OnDlq.BLOCK_GROUP)
                    handled = [value for _, value in world.handled]
                    duplicates[keep] += len(handled) - len(set(handled))
    print(
        f"duplicates over every crash position: {duplicates[True]} with metadata, {duplicates[False]} without"
    )
    assert duplicates[True] < duplicates[False]


def test_the_check_catches_a_lost_message() -> None:
    world = run(_world("transient"), OnDlq.BLOCK_GROUP, 0)
    world.handled = [h for h in world.handled if h[1] != 4]
    with pytest.raises(AssertionError, match="lost"):
        check(world, OnDlq.BLOCK_GROUP)


def test_the_check_catches_order_broken() -> None:
    world = run(_world("transient"), OnDlq.BLOCK_GROUP, 0)
    world.handled = list(reversed(world.handled))
    with pytest.raises(AssertionError, match="out of order"):
        check(world, OnDlq.BLOCK_GROUP)


def test_the_search_catches_a_replayed_retry_copy_delivered_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant engine that delivers a retry copy it had already handled before a crash (no SKIP)
    breaks per-key order at some crash position; the search must find it."""
    import app.ordered.engine as engine
    from app.ordered.rules import Action

    rule = engine.decide_retry  # type: ignore[attr-defined]  # the name the engine calls, patched below

    def without_skip(*args):  # type: ignore[no-untyped-def]
        action = rule(*args)
        return Action.DELIVER if action is Action.SKIP else action

    monkeypatch.setattr(engine, "decide_retry", without_skip)
    with pytest.raises(AssertionError, match="out of order"):
        test_one_crash_at_every_point("one key", OnDlq.BLOCK_GROUP)


def test_without_adopting_orphaned_copies_a_crash_breaks_order() -> None:
    """A crash between the broker's confirmation of a retry copy and the state write: the source
    record is handled again on restart (the downstream may take it this time) and the copy comes
    out of the retry topic later. Without adoption the search finds the break."""
    broken = 0
    for name in SCENARIOS:
        for seed in SEEDS:
            hits = run(_world(name), OnDlq.BLOCK_GROUP, seed).hits
            for n in range(1, hits + 1):
                world = _world(name)
                world.crash_at = {n}
                try:
                    check(run(world, OnDlq.BLOCK_GROUP, seed, adopt=False), OnDlq.BLOCK_GROUP)
                except AssertionError:
                    broken += 1
    assert broken > 0
