"""The distributed error-rate throttle, pure: every copy publishes its cumulative attempt and
failure counts in its heartbeat; every copy reads all heartbeats and computes the same failure
rate over the window, so all copies slow down (and recover) together."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from app.consumer.model import ThrottlePolicy

__all__ = ["Sample", "Throttle"]


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    attempts: int  # cumulative handler calls of the copy
    failures: int  # cumulative handler failures of the copy


class Throttle:
    def __init__(self, policy: ThrottlePolicy) -> None:
        self.policy = policy
        self._samples: dict[str, deque[Sample]] = {}

    def observe(self, member: str, sample: Sample) -> None:
        samples = self._samples.setdefault(member, deque())
        if samples and sample.at_s <= samples[-1].at_s:
            return
        samples.append(sample)

    def forget(self, member: str) -> None:
        self._samples.pop(member, None)

    def window(self, now_s: float) -> tuple[int, int]:
        """(attempts, failures) of all copies over the last window_s."""
        attempts = failures = 0
        start = now_s - self.policy.window_s
        for member, samples in list(self._samples.items()):
            while len(samples) > 1 and samples[1].at_s <= start:
                samples.popleft()  # keep one sample at or before the window's start
            newest = samples[-1]
            if newest.at_s < start:
                del self._samples[member]  # silent for a whole window: gone
                continue
            oldest = samples[0]
            attempts += newest.attempts - oldest.attempts
            failures += newest.failures - oldest.failures
        return attempts, failures

    def active(self, now_s: float) -> bool:
        attempts, failures = self.window(now_s)
        return attempts >= self.policy.min_attempts and failures > self.policy.error_rate * attempts

    def copies(self) -> int:
        return max(1, len(self._samples))
