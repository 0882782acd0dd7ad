"""Reaper rules: which batches the periodic reaper expires (same rule as DELETE .../open|closed?since=)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReapPolicy"]


@dataclass(frozen=True)
class ReapPolicy:
    open_after_s: float
    closed_after_s: float

    def cutoffs_ms(self, now_ms: int) -> dict[bool, int]:
        """{is_closed: batches not updated after this time are expired}."""
        return {False: now_ms - int(self.open_after_s * 1000), True: now_ms - int(self.closed_after_s * 1000)}
