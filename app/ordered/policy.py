"""How the ordered-delivery engine treats a failure (Varadhi): when to retry through RQ and how
long to wait, and what a group's later messages do while one of its messages is in DLQ."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.ordered.errors import InvalidPolicy

__all__ = ["Backoff", "OnDlq", "RetryPolicy"]


class Backoff(StrEnum):
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class OnDlq(StrEnum):
    BLOCK_GROUP = "block_group"  # later messages of the group follow it to DLQ (default)
    SKIP_FAILED = "skip_failed"  # later messages of the group go on


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`max_attempts` counts every delivery attempt, the first included (1 = never retry)."""

    max_attempts: int = 3
    backoff: Backoff = Backoff.EXPONENTIAL
    min_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    retry_statuses: tuple[int, ...] = (408, 429)
    retry_5xx: bool = True
    retry_timeouts: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 100:
            raise InvalidPolicy("max_attempts must be between 1 and 100")
        if not 0 <= self.min_backoff_s <= self.max_backoff_s <= 86_400:
            raise InvalidPolicy("backoff needs 0 <= min_backoff_s <= max_backoff_s <= 86400")

    def delay_s(self, failed_attempts: int) -> float:
        """Wait before the next attempt after `failed_attempts` (>= 1) failures."""
        n = max(1, failed_attempts)
        raw = self.min_backoff_s * n if self.backoff is Backoff.LINEAR else self.min_backoff_s * 2 ** (n - 1)
        return float(min(self.max_backoff_s, raw))

    def is_retriable(
        self, retriable_by_type: bool, status: int | None = None, timed_out: bool = False
    ) -> bool:
        """Retriable: timeouts, the listed statuses and 5xx per policy; otherwise the error type decides."""
        if timed_out:
            return self.retry_timeouts
        if status is not None:
            return status in self.retry_statuses or (self.retry_5xx and 500 <= status <= 599)
        return retriable_by_type

    def may_retry(self, failed_attempts: int) -> bool:
        return failed_attempts < self.max_attempts

    def to_json(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "backoff": self.backoff.value,
            "min_backoff_s": self.min_backoff_s,
            "max_backoff_s": self.max_backoff_s,
            "retry_statuses": list(self.retry_statuses),
            "retry_5xx": self.retry_5xx,
            "retry_timeouts": self.retry_timeouts,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetryPolicy:
        try:
            return cls(
                max_attempts=int(data.get("max_attempts", 3)),
                backoff=Backoff(data.get("backoff", "exponential")),
                min_backoff_s=float(data.get("min_backoff_s", 1.0)),
                max_backoff_s=float(data.get("max_backoff_s", 60.0)),
                retry_statuses=tuple(int(s) for s in data.get("retry_statuses", (408, 429))),
                retry_5xx=bool(data.get("retry_5xx", True)),
                retry_timeouts=bool(data.get("retry_timeouts", True)),
            )
        except (TypeError, ValueError) as exc:
            raise InvalidPolicy(f"bad retry policy: {exc}") from exc
