"""Voided ranges: sorted, disjoint, coalesced, looked up by bisection; checked against a plain set."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from app.hub.voids import add_void, is_void, remove_voids, void_ranges

ranges = st.lists(
    st.tuples(st.integers(1, 60), st.integers(0, 5)).map(lambda p: (p[0], p[0] + p[1])), max_size=12
)


def members(pairs: list[tuple[int, int]]) -> set[int]:
    return {seq for first, last in pairs for seq in range(first, last + 1)}


@given(ranges)
def test_added_ranges_hold_exactly_the_voided_numbers_sorted_and_coalesced(
    pairs: list[tuple[int, int]],
) -> None:
    voids: tuple[tuple[int, int], ...] = ()
    for first, last in pairs:
        voids = add_void(voids, first, last)
    assert {seq for seq in range(0, 70) if is_void(voids, seq)} == members(pairs)
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(voids))  # apart, in order
    assert void_ranges(reversed(pairs)) == voids  # a ledger written in any order reads the same


@given(ranges, st.data())
def test_removing_ranges_read_earlier_keeps_ranges_voided_since(
    pairs: list[tuple[int, int]], data: st.DataObject
) -> None:
    earlier = void_ranges(pairs)
    later = add_void(earlier, 100, 101) if earlier else earlier
    left = remove_voids(later, earlier)
    assert left == (((100, 101),) if earlier else ())
    picked = data.draw(st.lists(st.sampled_from(earlier), unique=True) if earlier else st.just([]))
    assert set(remove_voids(earlier, picked)) == set(earlier) - set(picked)
