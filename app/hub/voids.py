"""A recipient's voided sequence numbers (claims of saves that died or gave up), as sorted, disjoint,
coalesced ranges `(first, last, since_s)`: looked up by bisection, so a Peek skipping voided events
costs O(log n) per event however many claims were voided. `since_s` is when the range was voided
(the latest of the claims coalesced into it): the reclaim sweep deletes what a range holds and
drops it from the ledger once it is older than the dedup window (reclaim.py), so a save that was
paused past its lease and writes on afterwards cannot make its events reappear sooner. Pure."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

__all__ = ["VoidRange", "VoidRanges", "add_void", "is_void", "remove_voids", "void_ranges"]

VoidRange = tuple[int, int, float]
VoidRanges = tuple[VoidRange, ...]
_END = 1 << 62


def add_void(voids: VoidRanges, first: int, last: int, since_s: float) -> VoidRanges:
    """`voids` with `first..last` voided at `since_s` too, kept sorted, disjoint and coalesced."""
    if first > last:
        raise ValueError(f"empty void range {first}..{last}")
    return void_ranges((*voids, (first, last, since_s)))


def void_ranges(ranges: Iterable[VoidRange]) -> VoidRanges:
    """Ranges in any order (a ledger written by an older version) as sorted, coalesced ranges."""
    merged: list[VoidRange] = []
    for lo, hi, since in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            first, last, was = merged[-1]
            merged[-1] = (first, max(last, hi), max(was, since))
        else:
            merged.append((lo, hi, since))
    return tuple(merged)


def is_void(voids: VoidRanges, seq: int) -> bool:
    """Whether `seq` lies in one of the (sorted, disjoint) ranges."""
    if not voids:  # the usual ledger: nothing voided
        return False
    i = bisect.bisect_right(voids, (seq, _END, float("inf"))) - 1
    return i >= 0 and voids[i][0] <= seq <= voids[i][1]


def remove_voids(voids: VoidRanges, done: Iterable[VoidRange]) -> VoidRanges:
    """`voids` without the ranges in `done` (ranges read earlier: one voided meanwhile and coalesced
    with them stays whole, so only exact matches are removed)."""
    gone = set(done)
    return tuple(v for v in voids if v not in gone)
