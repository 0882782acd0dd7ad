"""A live view of a job's stages for a person at a terminal: one bar per stage with its count,
rate and time left (rich), and the figures of each stage for the job's summary.

Stages are declared up front, in the order they run; each is started by its first update and
finished by `finish`. Updates may come from any thread (rich's Progress locks). On a console that
is not a terminal nothing redraws: a line is printed as each stage finishes instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
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

__all__ = ["StageFigures", "Stages", "stage_timeline"]


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
    """The stages' counts and clocks live in rich's tasks (start_task starts a clock, stop_task
    stops it); this class only names them and keeps a finished stage from moving again."""

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
            disable=not console.is_terminal,  # a log gets a line per finished stage (finish)
            get_time=time.monotonic,
        )
        self._ids: dict[str, TaskID] = {
            key: self._progress.add_task(title, start=False, total=None) for key, title in stages
        }
        self._lock = threading.Lock()  # one check-then-change at a time per stage

    def __enter__(self) -> Stages:
        self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for key in self.figures():
            self.finish(key)
        self._progress.stop()

    def _task(self, key: str) -> Task:
        task_id = self._ids[key]
        return next(task for task in self._progress.tasks if task.id == task_id)

    def update(self, key: str, count: int, total: int | None = None, note: str = "") -> None:
        """The stage's count so far (and its total once known); starts the stage's clock."""
        with self._lock:
            task = self._task(key)
            if task.stop_time is not None:
                return
            if task.start_time is None:
                self._progress.start_task(task.id)
            description = self._titles[key] + (f" ({note})" if note else "")
            self._progress.update(task.id, completed=count, total=total, description=description)

    def finished(self, key: str) -> bool:
        """Whether the stage has ended (its count no longer moves)."""
        with self._lock:
            return self._task(key).stop_time is not None

    def finish(self, key: str) -> None:
        with self._lock:
            task = self._task(key)
            if task.start_time is None or task.stop_time is not None:
                return
            if task.total is None:
                self._progress.update(task.id, total=task.completed)
            self._progress.stop_task(task.id)
        if not self.console.is_terminal:
            figures = self.figures()[key]
            self.console.print(
                f"  {figures.title}: {figures.count:,} in {figures.seconds:,.1f} s ({figures.rate:,.0f}/s)"
            )

    def figures(self) -> dict[str, StageFigures]:
        """Per started stage, in declared order: its count, total and seconds (up to now while it runs)."""
        figures: dict[str, StageFigures] = {}
        for key, title in self._titles.items():
            task = self._task(key)
            if task.start_time is not None:
                total = None if task.total is None else int(task.total)
                figures[key] = StageFigures(
                    key, title, int(task.completed), total, task.start_time, task.stop_time
                )
        return figures

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


def stage_timeline(figures: Mapping[str, StageFigures], since: float) -> dict[str, list[float | None]]:
    """Per stage, [start, end] in seconds after `since` (a time.monotonic()); end None while it runs."""
    return {
        key: [
            round(f.started_at - since, 2),
            None if f.ended_at is None else round(f.ended_at - since, 2),
        ]
        for key, f in figures.items()
    }
