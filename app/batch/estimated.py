"""Estimated batches: a counter per batch (double acks count twice), complete when closed and <= 0."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from app.batch.errors import BatchNotFound
from app.batch.exact import Removal
from app.batch.model import (
    ESTIMATED_PREFIX,
    BatchStore,
    Completion,
    EstimatedBatch,
    estimated_key,
    request_key,
    request_prefix,
)
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
        self, store: BatchStore, batch_id: str, delta: int, now_ms: int, request_id: str | None = None
    ) -> tuple[EstimatedBatch, Completion | None]:
        """Move the counter by `delta` (negative = decrement). With a `request_id` this batch has
        seen, nothing moves: the answer is the batch as that call left it (a retry after a lost
        answer must not count twice)."""
        before = self.get(store, batch_id)
        if request_id is not None:
            answered = store.get(request_key(estimated_key(batch_id), request_id))
            if answered is not None:
                return EstimatedBatch.decode(batch_id, answered), self._due(before, now_ms)
        after, completion = self._write(
            store, replace(before, pending=before.pending + delta, updated_at_ms=now_ms), now_ms
        )
        if request_id is not None:
            store.put(request_key(estimated_key(batch_id), request_id), after.encode())
        return after, completion

    def close(
        self, store: BatchStore, batch_id: str, now_ms: int
    ) -> tuple[EstimatedBatch, Completion | None]:
        before = self.get(store, batch_id)
        return self._write(store, replace(before, is_closed=True, updated_at_ms=now_ms), now_ms)

    def delete(self, store: BatchStore, batch_id: str) -> None:
        self.get(store, batch_id)
        self._remove(store, batch_id)

    @staticmethod
    def _remove(store: BatchStore, batch_id: str) -> None:
        for key, _ in list(store.scan(request_prefix(estimated_key(batch_id)))):
            store.delete(key)
        store.delete(estimated_key(batch_id))

    def expire(self, store: BatchStore, closed: bool, not_updated_since_ms: int) -> Removal:
        removal = Removal(0, 0)
        for key, raw in list(store.scan(ESTIMATED_PREFIX)):
            batch = EstimatedBatch.decode(key[len(ESTIMATED_PREFIX) :].decode(), raw)
            if batch.is_closed == closed and batch.updated_at_ms <= not_updated_since_ms:
                self._remove(store, batch.batch_id)
                removal += Removal(1, max(batch.pending, 0))
        return removal

    def confirm_completion(self, store: BatchStore, batch_id: str) -> None:
        """The broker confirmed the batch's completion event: never emit it again."""
        raw = store.get(estimated_key(batch_id))
        if raw is not None:
            batch = EstimatedBatch.decode(batch_id, raw)
            if not batch.completion_reported:
                store.put(estimated_key(batch_id), replace(batch, completion_reported=True).encode())

    @staticmethod
    def _write(
        store: BatchStore, after: EstimatedBatch, now_ms: int
    ) -> tuple[EstimatedBatch, Completion | None]:
        """Store `after`; its completion while one is due (complete, none confirmed yet). A counter
        that moves up and back to zero after its completion was confirmed completes only once."""
        store.put(estimated_key(after.batch_id), after.encode())
        return after, EstimatedRules._due(after, now_ms)

    @staticmethod
    def _due(batch: EstimatedBatch, now_ms: int) -> Completion | None:
        if batch.completion_due:
            return Completion("estimated", batch.batch_id, batch.user_key, now_ms)
        return None
