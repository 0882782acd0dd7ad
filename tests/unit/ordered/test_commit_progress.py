"""Finished offsets above the committed one, kept in the commit's metadata: the encoding, its size
bound, and a chain of crashed owners where each next owner hands out every unfinished record and
none of the finished ones the commit recorded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.ordered.progress import OffsetTracker, decode_finished, encode_finished

offsets_above = st.lists(st.integers(0, 5_000), max_size=300).map(lambda xs: sorted(set(xs)))


@given(st.integers(0, 1 << 40), offsets_above)
def test_finished_offsets_round_trip(base: int, rel: list[int]) -> None:
    finished = [base + r for r in rel]
    assert decode_finished(base, encode_finished(base, finished)) == frozenset(finished)


@given(st.integers(0, 1 << 40), offsets_above, st.integers(8, 200))
def test_a_bounded_encoding_keeps_a_prefix(base: int, rel: list[int], max_chars: int) -> None:
    finished = [base + r for r in rel]
    metadata = encode_finished(base, finished, max_chars)
    assert len(metadata) <= max(max_chars, len(encode_finished(base, [], max_chars)))
    kept = sorted(decode_finished(base, metadata))
    assert kept == finished[: len(kept)]  # a prefix, never an offset that was not finished


def test_runs_and_bitsets_both_stay_small() -> None:
    dense = list(range(1_000, 11_000))  # one run
    alternate = list(range(1, 2_000, 2))  # a bitset
    assert len(encode_finished(0, dense)) < 20
    assert len(encode_finished(0, alternate)) < 400
    assert decode_finished(0, encode_finished(0, alternate)) == frozenset(alternate)


def test_other_metadata_is_no_finished_offsets() -> None:
    metadata = encode_finished(100, [101, 105])
    assert decode_finished(100, metadata) == {101, 105}
    assert decode_finished(101, metadata) == frozenset()  # committed again by someone else
    for other in (None, "", "hello", "hs1r!!", "hs1x" + metadata[4:], metadata[:-4], "hs1r/////w=="):
        assert decode_finished(100, other) == frozenset()


@st.composite
def lives(draw: st.DrawFn) -> tuple[int, list[tuple[int, set[int]]]]:
    """Records 0..n-1, and for each owner before the last: how many it reads, which of them finish
    before it crashes."""
    n = draw(st.integers(1, 60))
    owner = st.tuples(st.integers(0, n), st.sets(st.integers(0, n - 1)))
    return n, draw(st.lists(owner, min_size=1, max_size=4))


@given(lives(), st.integers(8, 400))
def test_each_next_owner_handles_every_unfinished_record_and_no_recorded_one(
    life: tuple[int, list[tuple[int, set[int]]]], max_chars: int
) -> None:
    n, owners = life
    committed, metadata = 0, ""
    finished: set[int] = set()  # by any owner, ever
    for reads, finish in owners:
        recorded = decode_finished(committed, metadata)
        assert recorded <= finished, "a commit recorded an offset nobody finished"
        tracker = OffsetTracker(committed, recorded)
        handed = [o for o in range(committed, min(n, committed + reads)) if tracker.read(o)]
        assert not set(handed) & recorded, "a recorded finished offset was handed out again"
        for offset in (o for o in handed if o in finish):
            tracker.finish(offset)
            finished.add(offset)
        committed, metadata = tracker.committable, tracker.progress(max_chars)  # then it crashes
    last = OffsetTracker(committed, decode_finished(committed, metadata))
    served = {o for o in range(committed, n) if last.read(o)}
    unfinished = set(range(n)) - finished
    assert unfinished <= served, f"unfinished records {sorted(unfinished - served)} were not handed out"
    assert not served & decode_finished(committed, metadata)
    assert all(o >= committed for o in unfinished)


def test_an_inherited_offset_behind_an_open_one_keeps_the_commit_below_it() -> None:
    tracker = OffsetTracker(10, {12, 13, 20})
    assert tracker.read(10) and tracker.read(11)
    assert not tracker.read(12) and not tracker.read(13)
    assert tracker.committable == 10
    assert tracker.finished_above() == [12, 13, 20]  # 20 not read yet: still recorded
    tracker.finish(11)
    tracker.finish(10)
    assert tracker.committable == 14
    assert tracker.open == 0
    assert decode_finished(14, tracker.progress()) == {20}
    assert tracker.read(15) and not tracker.read(20)  # 16..19 never came (compaction)
    assert tracker.committable == 15
