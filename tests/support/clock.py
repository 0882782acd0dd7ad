"""The hub repository's clock, moved by hand: a claim's lease expires when the test says so, not
after a real wait (which a slow save could also outlast)."""

from __future__ import annotations

import pytest

from app.hub import ledgers

__all__ = ["Clock", "hub_clock"]


class Clock:
    """Stands in for the `time` module where only `time.time()` is read."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def pass_(self, deadline_s: float) -> None:
        """Move just past `deadline_s` (a claim's `lease_until_s`), if not there yet."""
        self.now = max(self.now, deadline_s + 0.001)


def hub_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Give the hub's ledgers a clock the test moves (claims' leases and their reaping)."""
    fake = Clock()
    monkeypatch.setattr(ledgers, "time", fake)
    return fake
