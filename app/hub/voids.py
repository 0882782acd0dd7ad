"""A recipient's voided sequence numbers (claims of saves that died or gave up), as sorted, disjoint,
coalesced ranges `(first, last)`: looked up by bisection, so a Peek skipping voided events costs
O(log n) per event however many claims were voided, and dropped once the reclaim sweep deleted
every document in them (reclaim.py). Pure."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

__all__ = ["VoidRanges", "add_void", "is_void", "remove_voids", "void_ranges"]

VoidRanges = tuple[tuple[int, int], ...]


def add_void(voids: VoidRanges, first: int, last: int) -> VoidRanges:
    """`voids` with `first..last` voided too, kept sorted, disjoint and coalesced."""
    if first > last:
        raise ValueError(f"empty void range {first}..{last}")
    return void_ranges((*voids, (first, last)))


def void_ranges(pairs: Iterable[tuple[int, int]]) -> VoidRanges:
    """Ranges in any order (a ledger written by an older version) as sorted, coalesced ranges."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(pairs):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def is_void(voids: VoidRanges, seq: int) -> bool:
    """Whether `seq` lies in one of the (sorted, disjoint) ranges."""
    i = bisect.bisect_right(voids, (seq, 1 << 62)) - 1
    return i >= 0 and voids[i][0] <= seq <= voids[i][1]


def remove_voids(voids: VoidRanges, done: Iterable[tuple[int, int]]) -> VoidRanges:
    """`voids` without the ranges in `done` (ranges read earlier: one voided meanwhile and coalesced
    with them stays whole, so only exact matches are removed)."""
    gone = set(done)
    return tuple(v for v in voids if v not in gone)
