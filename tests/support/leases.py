"""Leases that always hold, for tests that drive a copy's internals without an owner log."""

from __future__ import annotations

from collections.abc import Iterable

from app.ordered.lease import Lease

__all__ = ["held_leases"]


def held_leases(partitions: Iterable[int]) -> dict[int, Lease]:
    inf = float("inf")
    return {p: Lease(f"test/p{p}", "test", 0, inf, acts_from=-inf, valid_until=inf) for p in partitions}
