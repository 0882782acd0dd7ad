"""Exhaustive check of the lane lease (`app.ordered.lease`): no instant at which two owners act.

Discrete time, ticks 0..T-1, lease duration L. The old owner holds a confirmed claim from tick 0
on. At each tick it is paused, runs without reading the log, or reads the log: the read starts at
the tick and asks the log's end then or one tick later (a pause between the two), and sees a
record written before that end. It acts at every tick it runs while `Lease.may_act`. The new
owner's claim is written at tick a and confirmed to it at a or a + 1; it acts from `takeover_at`.
Every schedule up to the bound is run (4^T old-owner schedules times every claim), checking that
the old owner's last act comes before the new owner's first. A lease granted one tick too long
is caught by the same search.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from app.ordered.lease import LaneClaim, Lease, OwnerRecord, OwnerView, takeover_at

T = 7
L = 2
PAUSED, RUN, READ_NOW, READ_LATE = range(4)


def _violation(grant: Callable[[float], float], draining: bool = False) -> tuple[object, ...] | None:
    """The first schedule in which the old owner acts at or after the new owner's first act."""
    for claim_at in range(T - 1):
        for confirm_lag in (0, 1):
            confirmed_at = claim_at + confirm_lag
            new_from = takeover_at(_unreleased(), confirmed_at, L)
            for schedule in itertools.product(range(4), repeat=T):
                last = _old_owner_last_act(schedule, claim_at, grant, draining)
                if last is not None and last >= new_from:
                    return (claim_at, confirm_lag, schedule, last, new_from)
    return None


def _unreleased() -> LaneClaim:
    view = OwnerView()
    view.apply(OwnerRecord("claim", "lane", 0, owner="old", nonce="old"))
    return view.claims["lane"]


def _old_owner_last_act(
    schedule: tuple[int, ...], claim_at: int, grant: Callable[[float], float], draining: bool
) -> int | None:
    view = OwnerView()
    view.apply(OwnerRecord("claim", "lane", 0, owner="old", nonce="old"))
    lease = Lease("lane", "old", 0, L, acts_from=0.0, valid_until=grant(0.0), draining=draining)
    last = None
    for tick, step in enumerate(schedule):
        if step == PAUSED:
            continue
        if step in (READ_NOW, READ_LATE):
            end_asked = tick + (1 if step == READ_LATE else 0)
            seen = view if claim_at >= end_asked else _with_new_claim()
            before = lease.valid_until
            lease.confirm(seen, tick)
            if not lease.lost and seen.claim_of("lane", "old") is not None:  # a confirming read
                lease.valid_until = max(before, grant(tick))
        if lease.may_act(tick):
            last = tick
    return last


def _with_new_claim() -> OwnerView:
    view = OwnerView()
    view.apply(OwnerRecord("claim", "lane", 0, owner="old", nonce="old"))
    view.apply(OwnerRecord("claim", "lane", 1, owner="new", nonce="new"))
    return view


@pytest.mark.parametrize("draining", [False, True])
def test_no_two_owners_act_at_once(draining: bool) -> None:
    """`draining`: the old owner finishes a handover, acting on until its lease runs out."""
    assert _violation(lambda started: started + L, draining) is None


@pytest.mark.parametrize("draining", [False, True])
def test_a_lease_one_tick_too_long_is_caught(draining: bool) -> None:
    found = _violation(lambda started: started + L + 1, draining)
    assert found is not None
