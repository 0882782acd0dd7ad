"""Offset tracking, key lanes, the global in-flight split, the throttle and member records."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.consumer.members import Member, live_members
from app.consumer.model import ThrottlePolicy
from app.consumer.throttle import Sample, Throttle
from app.ordered.progress import KeyLanes, OffsetTracker, partition_shares


@given(st.integers(0, 1000), st.permutations(range(12)), st.integers(0, 12))
def test_committable_is_the_first_offset_not_finished(start: int, order: list[int], finished: int) -> None:
    tracker = OffsetTracker(start)
    offsets = [start + 3 * i for i in range(12)]  # gaps, as compaction and markers leave them
    for offset in offsets:
        tracker.read(offset)
    done = {offsets[i] for i in order[:finished]}
    for offset in (offsets[i] for i in order[:finished]):
        tracker.finish(offset)
    open_ = [o for o in offsets if o not in done]
    assert tracker.committable == (open_[0] if open_ else offsets[-1] + 1)
    assert tracker.open == len(open_)


def test_an_offset_read_twice_is_refused() -> None:
    tracker = OffsetTracker(5)
    tracker.read(5)
    try:
        tracker.read(5)
    except ValueError:
        return
    raise AssertionError("a re-read offset was taken")


@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=40))
def test_lanes_run_one_item_per_key_in_order(steps: list[tuple[str, bool]]) -> None:
    """Adds, and completions of a running key, in any order: each key's items start in add order,
    never two at once."""
    lanes: KeyLanes[str, int] = KeyLanes()
    running: dict[str, int] = {}
    started: dict[str, list[int]] = {}
    added: dict[str, list[int]] = {}
    for n, (key, complete) in enumerate(steps):
        if complete and key in running:
            del running[key]
            nxt = lanes.done(key)
            if nxt is not None:
                running[key] = nxt
                started.setdefault(key, []).append(nxt)
            continue
        added.setdefault(key, []).append(n)
        if lanes.add(key, n):
            assert key not in running
            running[key] = n
            started.setdefault(key, []).append(n)
    for key, items in started.items():
        assert items == added[key][: len(items)]
    assert lanes.busy == len(running)


@given(st.integers(1, 500), st.integers(1, 64))
def test_partition_shares_sum_to_the_global_limit(total: int, partitions: int) -> None:
    shares = partition_shares(total, partitions)
    assert sum(shares) == total
    assert max(shares) - min(shares) <= 1


def test_throttle_follows_the_failure_rate_of_all_copies() -> None:
    throttle = Throttle(ThrottlePolicy(error_rate=0.5, window_s=10, min_attempts=10))
    throttle.observe("a", Sample(0, 0, 0))
    throttle.observe("b", Sample(0, 0, 0))
    throttle.observe("a", Sample(5, 100, 10))
    throttle.observe("b", Sample(5, 10, 9))
    assert not throttle.active(5)  # 19 of 110 failed
    throttle.observe("a", Sample(9, 110, 70))  # a: 70 of 110 now
    assert throttle.active(9)  # 79 of 120 failed
    assert throttle.copies() == 2
    throttle.observe("a", Sample(30, 300, 70))  # the window moved past the failures; b went silent
    throttle.observe("a", Sample(35, 400, 70))
    assert not throttle.active(35)
    assert throttle.copies() == 1


def test_members_are_the_newest_live_heartbeats() -> None:
    def beat(member: str, at_ms: int) -> tuple[bytes, bytes]:
        return member.encode(), Member(member, "h", 1, 0, at_ms, 2.0, [0, 1]).encode()

    records = [
        beat("a", 1_000),
        beat("b", 1_000),
        beat("a", 9_000),
        (b"b", None),
        beat("c", 1_000),
        (None, b"x"),
    ]
    live = live_members(records, now_ms=9_500)
    assert [m.member for m in live] == ["a"]  # b left cleanly, c is silent past three heartbeats
    assert live[0].at_ms == 9_000
