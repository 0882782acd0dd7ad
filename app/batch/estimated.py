"""Estimated batches: a counter per batch (double acks count twice), complete when closed and <= 0."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from app.batch.errors import BatchNotFound
from app.batch.exact import Removal
from app.batch.model import ESTIMATED_PREFIX, BatchStore, Completion, EstimatedBatch, estimated_key
from app.errors import InvalidInput

__all__ = ["EstimatedRules", "check_count"]

MAX_COUNT = 2**62


def check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
        raise InvalidInput(f"{name} must be an integer from {minimum} to {MAX_COUNT}, got {value!r}")
    return value


@dataclass(frozen=True)
class EstimatedRules:
    def create(
        self, store: BatchStore, batch_size: int, user_key: str | None, now_ms: int, new_id: Callable[[], str]
    ) -> EstimatedBatch:
        batch = EstimatedBatch(
            new_id(), user_key, False, check_count("batchSize", batch_size, 0), now_ms, now_ms
        )
        store.put(estimated_key(batch.batch_id), batch.encode())
        return batch

    def get(self, store: BatchStore, batch_id: str) -> EstimatedBatch:
        raw = store.get(estimated_key(batch_id))
        if raw is None:
            raise BatchNotFound(f"estimated batch {batch_id} does not exist")
        return EstimatedBatch.decode(batch_id, raw)

    def add(
        self, store: BatchStore, batch_id: str, delta: int, now_ms: int
    ) -> tuple[EstimatedBatch, Completion | None]:
        """Move the counter by `delta` (negative = decrement)."""
        before = self.get(store, batch_id)
        after = replace(before, pending=before.pending + delta, updated_at_ms=now_ms)
        store.put(estimated_key(batch_id), after.encode())
        return after, self._completion(before, after, now_ms)

    def close(
        self, store: BatchStore, batch_id: str, now_ms: int
    ) -> tuple[EstimatedBatch, Completion | None]:
        before = self.get(store, batch_id)
        after = replace(before, is_closed=True, updated_at_ms=now_ms)
        store.put(estimated_key(batch_id), after.encode())
        return after, self._completion(before, after, now_ms)

    def delete(self, store: BatchStore, batch_id: str) -> None:
        self.get(store, batch_id)
        store.delete(estimated_key(batch_id))

    def expire(self, store: BatchStore, closed: bool, not_updated_since_ms: int) -> Removal:
        removal = Removal(0, 0)
        for key, raw in list(store.scan(ESTIMATED_PREFIX)):
            batch = EstimatedBatch.decode(key[len(ESTIMATED_PREFIX) :].decode(), raw)
            if batch.is_closed == closed and batch.updated_at_ms <= not_updated_since_ms:
                store.delete(key)
                removal += Removal(1, max(batch.pending, 0))
        return removal

    @staticmethod
    def _completion(before: EstimatedBatch, after: EstimatedBatch, now_ms: int) -> Completion | None:
        if after.is_complete and not before.is_complete:
            return Completion("estimated", after.batch_id, after.user_key, now_ms)
        return None
