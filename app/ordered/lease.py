"""Lane ownership as fenced leases: who may act for a lane (a subscription's shard), and from when.

Claims and releases are records of one shared log (`app.ordered.ports.OwnerLog`). A claim's
place in that log is its *epoch*: later claims have higher epochs, whoever wrote them, and the
latest claim of a lane names its owner. Nobody compares wall clocks:

- An owner may act while its lease holds: the latest claim of its lane is its own, as of a read
  of the log that started less than `duration_s` ago on its own monotonic clock. A read that
  finds a later claim ends the lease for good (`LaneLost`).
- A new owner writes its claim and, when the previous claim was not released, waits
  `duration_s` from the moment the log confirmed its claim before it acts. Any read of the old
  owner that could still miss the new claim started before the claim was written, so the old
  lease has run out by then, however long the old owner was paused. A release of the previous
  claim seen meanwhile ends the wait at once: a clean handover costs no wait at all.

This bounds a stale owner's acts to what it started before its lease ran out (one endpoint call
or one write per lane at most); each act carries the owner's epoch so that a reader or an
endpoint can refuse a lower one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from app.errors import HubstreamError

__all__ = ["LaneLost", "Lease", "OwnerRecord", "OwnerView", "takeover_at"]


class LaneLost(HubstreamError):
    """This process no longer owns the lane: a later claim exists, or its lease ran out
    unconfirmed. The lane's work stops without writing anything more."""


@dataclass(frozen=True)
class OwnerRecord:
    """One record of the owner log: a claim (its `offset` becomes the claim's epoch) or the
    release of the claim with epoch `epoch`."""

    kind: Literal["claim", "release"]
    lane: str
    offset: int
    owner: str = ""
    nonce: str = ""
    epoch: int = -1
    lease_s: float = 0.0  # a claim's: the lease its owner holds (0: not said, an older record)


@dataclass(frozen=True)
class LaneClaim:
    epoch: int
    owner: str
    nonce: str
    released: bool = False
    lease_s: float = 0.0


@dataclass
class OwnerView:
    """Every lane's latest claim, from the owner log read in offset order; `previous` keeps the
    claim each latest one replaced (what a new owner waits for)."""

    claims: dict[str, LaneClaim] = field(default_factory=dict)
    previous: dict[str, LaneClaim | None] = field(default_factory=dict)

    def apply(self, record: OwnerRecord) -> None:
        known = self.claims.get(record.lane)
        if record.kind == "claim":
            self.previous[record.lane] = known
            self.claims[record.lane] = LaneClaim(
                record.offset, record.owner, record.nonce, lease_s=record.lease_s
            )
            return
        if known is not None and known.epoch == record.epoch:  # a release of an older claim: void
            self.claims[record.lane] = replace(known, released=True)
        before = self.previous.get(record.lane)
        if before is not None and before.epoch == record.epoch:
            self.previous[record.lane] = replace(before, released=True)

    def claim_of(self, lane: str, nonce: str) -> LaneClaim | None:
        """The lane's latest claim when it is the one written with `nonce`."""
        claim = self.claims.get(lane)
        return claim if claim is not None and claim.nonce == nonce else None


def takeover_at(previous: LaneClaim | None, confirmed_at: float, duration_s: float) -> float:
    """When a new owner may start acting, on its monotonic clock: at once after a released (or
    no) previous claim, else one lease after the log confirmed its own claim: the longer of its
    own duration and the one the previous claim declared (owners need not share a setting)."""
    if previous is None or previous.released:
        return confirmed_at
    return confirmed_at + max(duration_s, previous.lease_s)


@dataclass
class Lease:
    """One owner's lease of one lane. `valid_until` moves on with each read of the log that found
    the lane's latest claim still its own (`confirm`); `acts_from` is `takeover_at`."""

    lane: str
    nonce: str
    epoch: int
    duration_s: float
    acts_from: float
    valid_until: float
    lost: bool = False
    # Set by an owner finishing a partition it hands over (drain, commit, release): a later claim
    # then stops extending the lease instead of ending it, so the drain may still commit until
    # `valid_until`, which the successor waits out unless the release comes first.
    draining: bool = False

    def confirm(self, view: OwnerView, read_started_at: float) -> None:
        """Apply a read of the log that started at `read_started_at` (monotonic, taken before the
        log's end was asked) and took in everything up to that end."""
        if self.lost:
            return
        if view.claim_of(self.lane, self.nonce) is None:
            self.lost = not self.draining
            return
        self.valid_until = max(self.valid_until, read_started_at + self.duration_s)
        previous = view.previous.get(self.lane)
        if previous is None or previous.released:  # the old owner let go: no need to wait it out
            self.acts_from = min(self.acts_from, read_started_at)

    def may_act(self, now: float) -> bool:
        return not self.lost and self.acts_from <= now < self.valid_until

    def check(self, now: float) -> None:
        """Raise `LaneLost` unless this owner may act now (a takeover still waiting counts as
        not yet: callers wait with `wait_s` before their first act)."""
        if self.lost:
            raise LaneLost(f"lane {self.lane}: a later claim took it over (epoch {self.epoch} is stale)")
        if now >= self.valid_until:
            self.lost = True
            raise LaneLost(f"lane {self.lane}: lease of epoch {self.epoch} ran out unconfirmed")
        if now < self.acts_from:
            raise LaneLost(f"lane {self.lane}: epoch {self.epoch} still waits for the takeover")

    def wait_s(self, now: float) -> float:
        """How long until this owner may act (0 once it may)."""
        return max(0.0, self.acts_from - now)
