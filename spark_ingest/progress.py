"""How the ingest job tells its progress: Spark tasks per stage and, with --wait, the batch's acks.

`IngestProgress` is the port; `TextProgress` writes a line at most once per interval (the
default, for logs and spark-submit); a live view implements the same two calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from app.progress import Stages
from spark_ingest.batch import BatchState

__all__ = ["INGEST_STAGES", "IngestProgress", "StageProgress", "TextProgress"]

INGEST_STAGES = (
    ("counting valid rows", "Spark: counting valid rows (tasks)"),
    ("producing", "Spark: producing (tasks)"),
    ("acked", "batch items acked"),
)


class IngestProgress(Protocol):
    def tasks(self, stage: str, done: int, total: int) -> None:
        """Spark tasks of `stage` ("counting valid rows", "producing") done so far, of total."""
        ...

    def batch(self, state: BatchState) -> None:
        """The batch's state at each poll while waiting for completion."""
        ...


class TextProgress:
    def __init__(self, report: Callable[[str], None], interval_s: float) -> None:
        self.report = report
        self.interval_s = interval_s
        self._started = time.monotonic()
        self._last: dict[str, float] = {}

    def _due(self, what: str) -> bool:
        now = time.monotonic()
        if now - self._last.get(what, self._started) < self.interval_s:
            return False
        self._last[what] = now
        return True

    def tasks(self, stage: str, done: int, total: int) -> None:
        if self._due(stage):
            self.report(f"{stage}: {done}/{total} tasks done, {time.monotonic() - self._started:.0f} s")

    def batch(self, state: BatchState) -> None:
        if state.is_complete or self._due("batch"):
            acked = ""
            if state.acked_items is not None:
                acked = f", {state.acked_items:,} of {state.total_items:,} acked"
            elapsed = time.monotonic() - self._started
            self.report(f"batch {state.batch_id}: complete={state.is_complete}{acked} after {elapsed:.0f} s")


class StageProgress:
    """IngestProgress on a live stage board (INGEST_STAGES): a job's stage ends when the next
    one reports, the produce stage when the batch is first read (it is closed after producing)."""

    def __init__(self, stages: Stages) -> None:
        self.stages = stages
        self._current: tuple[str, int] | None = None  # stage and its task count

    def _end_current(self) -> None:
        if self._current is not None:
            stage, total = self._current
            self.stages.update(stage, total, total)
            self.stages.finish(stage)
            self._current = None

    def tasks(self, stage: str, done: int, total: int) -> None:
        if self._current is not None and self._current[0] != stage:
            self._end_current()
        self._current = (stage, total)
        self.stages.update(stage, done, total)

    def batch(self, state: BatchState) -> None:
        self._end_current()
        self.stages.update("acked", state.acked_items or 0, state.total_items)
        if state.is_complete:
            self.stages.finish("acked")
