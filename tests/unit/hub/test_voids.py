"""Voided ranges: sorted, disjoint, coalesced, looked up by bisection; checked against a plain set."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from app.hub.voids import VoidRange, add_void, is_void, remove_voids, void_ranges

ranges = st.lists(
    st.tuples(st.integers(1, 60), st.integers(0, 5), st.integers(0, 9)).map(
        lambda t: (t[0], t[0] + t[1], float(t[2]))
    ),
    max_size=12,
)


def members(voided: list[VoidRange]) -> set[int]:
    return {seq for first, last, _ in voided for seq in range(first, last + 1)}


@given(ranges)
def test_added_ranges_hold_exactly_the_voided_numbers_sorted_and_coalesced(voided: list[VoidRange]) -> None:
    voids: tuple[VoidRange, ...] = ()
    for first, last, since in voided:
        voids = add_void(voids, first, last, since)
    assert {seq for seq in range(0, 70) if is_void(voids, seq)} == members(voided)
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(voids))  # apart, in order
    assert void_ranges(reversed(voided)) == voids  # a ledger written in any order reads the same
    for first, last, since in voids:  # a range is as young as the youngest claim coalesced into it
        assert since == max(s for f, la, s in voided if first <= f and la <= last)


@given(ranges, st.data())
def test_removing_ranges_read_earlier_keeps_ranges_voided_since(
    voided: list[VoidRange], data: st.DataObject
) -> None:
    earlier = void_ranges(voided)
    later = add_void(earlier, 100, 101, 5.0) if earlier else earlier
    left = remove_voids(later, earlier)
    assert left == (((100, 101, 5.0),) if earlier else ())
    picked = data.draw(st.lists(st.sampled_from(earlier), unique=True) if earlier else st.just([]))
    assert set(remove_voids(earlier, picked)) == set(earlier) - set(picked)
