"""Batch tracking for the ingest job: a port (Protocol) and its HTTP adapter for the exact-batch API.

The API is Carlyle's (served by the workers): open a batch, add items (the answer names item
groups; item ids are `batchId:groupId:index` for index < upto), close it, read its state.
The adapter goes through `app.batch.client.BatchClient` (standard library HTTP, retries 503s).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from app.batch.client import BatchClient
from app.errors import HubstreamError
from spark_ingest.errors import BatchTrackingFailed
from spark_ingest.plan import ItemAssignment

__all__ = ["BatchState", "BatchTracker", "HttpBatchTracker", "open_assignment", "wait_complete"]

MAX_ITEMS_PER_ADD = 1_000_000
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BatchState:
    batch_id: str
    is_complete: bool
    is_closed: bool
    user_key: str | None
    pending_items: int | None = None
    total_items: int | None = None

    @property
    def acked_items(self) -> int | None:
        if self.pending_items is None or self.total_items is None:
            return None
        return self.total_items - self.pending_items


class BatchTracker(Protocol):
    """The four calls the job makes on the exact-batch API."""

    def open(self, user_key: str) -> str: ...

    def add_items(self, batch_id: str, items: int) -> list[tuple[str, int]]: ...

    def close(self, batch_id: str) -> None: ...

    def state(self, batch_id: str) -> BatchState: ...


class HttpBatchTracker:
    """BatchTracker over the workers' exact-batch HTTP API, through `app.batch.client.BatchClient`."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 30.0,
        admin_token: str | None = None,
        retry_for_s: float = 30.0,
    ) -> None:
        # retry_for_s: how long a 503 (partition recovering or moving) or a refused connection
        # (worker restarting) is retried before a call fails.
        self.client = BatchClient(base_url, timeout_s=timeout_s, token=admin_token, retry_for_s=retry_for_s)

    def open(self, user_key: str) -> str:
        return str(self._guard(lambda: self.client.create_exact(user_key)))

    def add_items(self, batch_id: str, items: int) -> list[tuple[str, int]]:
        groups = self._guard(lambda: self.client.add_items(int(batch_id), items))
        return [(group.id, group.upto) for group in groups]

    def close(self, batch_id: str) -> None:
        self._guard(lambda: self.client.close_exact(int(batch_id)))

    def state(self, batch_id: str) -> BatchState:
        answer = self._guard(lambda: self.client.get_exact(int(batch_id)))
        return BatchState(
            str(answer["batchId"]),
            bool(answer["isComplete"]),
            bool(answer["isClosed"]),
            answer.get("userKey"),
            answer.get("pendingItems"),
            answer.get("totalItems"),
        )

    def _guard(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except HubstreamError as exc:
            raise BatchTrackingFailed(f"batch API at {self.client.base_url}: {exc}") from exc


def open_assignment(tracker: BatchTracker, user_key: str, items: int) -> ItemAssignment:
    """Open a batch and add `items` items (in requests of at most MAX_ITEMS_PER_ADD)."""
    batch_id = tracker.open(user_key)
    groups: list[tuple[str, int]] = []
    remaining = items
    while remaining > 0:
        chunk = min(remaining, MAX_ITEMS_PER_ADD)
        groups.extend(tracker.add_items(batch_id, chunk))
        remaining -= chunk
    assignment = ItemAssignment(batch_id, tuple(groups))
    if assignment.items != items:
        raise BatchTrackingFailed(
            f"batch {batch_id}: asked for {items} items, the API granted {assignment.items}"
        )
    return assignment


def wait_complete(
    tracker: BatchTracker,
    batch_id: str,
    timeout_s: float,
    poll_s: float = 1.0,
    on_poll: Callable[[BatchState, float], None] | None = None,
) -> BatchState:
    """Poll until the batch is complete or `timeout_s` passed; returns the last state seen."""
    started = time.monotonic()
    while True:
        try:
            state = tracker.state(batch_id)
        except BatchTrackingFailed as exc:
            # A worker restarting or a partition moving answers 503 for a while; that is no
            # reason to stop waiting before our own deadline. Other errors end the wait.
            cause = exc.__cause__
            if (
                not (isinstance(cause, HubstreamError) and cause.retriable)
                or time.monotonic() - started >= timeout_s
            ):
                raise
            time.sleep(poll_s)
            continue
        elapsed = time.monotonic() - started
        if on_poll is not None:
            on_poll(state, elapsed)
        if state.is_complete or elapsed >= timeout_s:
            return state
        time.sleep(poll_s)
