"""A live view of a job's stages for a person at a terminal: one bar per stage with its count,
rate and time left (rich), and the figures of each stage for the job's summary.

Stages are declared up front, in the order they run; each is started by its first update and
finished by `finish`. Updates may come from any thread (rich's Progress locks). On a console that
is not a terminal nothing redraws: a line is printed as each stage finishes instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

__all__ = ["StageFigures", "Stages"]


@dataclass(frozen=True, slots=True)
class StageFigures:
    key: str
    title: str
    count: int
    total: int | None
    started_at: float  # time.monotonic() of its first update
    ended_at: float | None  # of its finish; None while it runs

    @property
    def seconds(self) -> float:
        return (time.monotonic() if self.ended_at is None else self.ended_at) - self.started_at

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0


class _Rate(ProgressColumn):
    """Items per second over the stage so far (rich's own speed column averages a short window)."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        if not task.completed or elapsed <= 0:
            return Text("", style="progress.data.speed")
        return Text(f"{task.completed / elapsed:,.0f}/s", style="progress.data.speed")


class Stages:
    def __init__(self, console: Console, stages: Sequence[tuple[str, str]]) -> None:
        self.console = console
        self._titles = dict(stages)
        self._progress = Progress(
            TextColumn("{task.description:<34}"),
            BarColumn(),
            MofNCompleteColumn(),
            _Rate(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            auto_refresh=console.is_terminal,
        )
        self._tasks: dict[str, TaskID] = {
            key: self._progress.add_task(title, start=False, total=None) for key, title in stages
        }
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._finished: dict[str, float] = {}
        self._counts: dict[str, tuple[int, int | None]] = {}

    def __enter__(self) -> Stages:
        self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for key in self.figures():
            self.finish(key)
        self._progress.stop()

    def update(self, key: str, count: int, total: int | None = None, note: str = "") -> None:
        """The stage's count so far (and its total once known); starts the stage's clock."""
        with self._lock:
            if key in self._finished:
                return
            if key not in self._started:
                self._started[key] = time.monotonic()
                self._progress.start_task(self._tasks[key])
            previous_total = self._counts.get(key, (0, None))[1]
            total = total if total is not None else previous_total
            self._counts[key] = (count, total)
        description = self._titles[key] + (f" ({note})" if note else "")
        self._progress.update(self._tasks[key], completed=count, total=total, description=description)

    def finish(self, key: str) -> None:
        with self._lock:
            if key in self._finished or key not in self._started:
                return
            self._finished[key] = time.monotonic()
            count, total = self._counts[key]
        task = self._tasks[key]
        self._progress.update(task, total=total if total is not None else count, completed=count)
        self._progress.stop_task(task)
        if not self.console.is_terminal:
            figures = self.figures()[key]
            self.console.print(
                f"  {figures.title}: {figures.count:,} in {figures.seconds:,.1f} s ({figures.rate:,.0f}/s)"
            )

    def figures(self) -> dict[str, StageFigures]:
        """Per started stage, in declared order: its count, total and seconds (up to now while it runs)."""
        with self._lock:
            return {
                key: StageFigures(
                    key,
                    self._titles[key],
                    self._counts[key][0],
                    self._counts[key][1],
                    started,
                    self._finished.get(key),
                )
                for key in self._titles
                if (started := self._started.get(key)) is not None
            }

    def table(self) -> Table:
        table = Table(title="stages", title_justify="left")
        for column in ("stage", "count", "of", "seconds", "per second"):
            table.add_column(column, justify="left" if column == "stage" else "right")
        for figures in self.figures().values():
            table.add_row(
                figures.title,
                f"{figures.count:,}",
                "" if figures.total is None else f"{figures.total:,}",
                f"{figures.seconds:,.1f}",
                f"{figures.rate:,.0f}",
            )
        return table
