"""`hubstream pipeline run`'s live view: entries appended to the commit log and, per writer, the
entries it has written of those, each with its rate and time left, then a table when it stops.
Counts start at this run (a restarted pipeline does not count what earlier runs did)."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from rich.console import Console

from app.pipeline.definition import PipelineDefinition
from app.progress import Stages

__all__ = ["PipelineProgress"]

LOG = "log"


class PipelineProgress:
    def __init__(self, console: Console, definition: PipelineDefinition) -> None:
        self.console = console
        writers = [(f"writer:{w.name}", f"writer {w.name}: written") for w in definition.writers]
        self.stages = Stages(console, [(LOG, "reader: entries in the commit log"), *writers])
        self._base: dict[str, int] | None = None  # where each count stood when the run began

    def __enter__(self) -> PipelineProgress:
        self.stages.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stages.__exit__(kind, error, trace)
        self.console.print(self.stages.table())

    def show(self, status: Mapping[str, Any]) -> None:
        """Update from the runtime's status (PipelineRuntime.status())."""
        end = max((int(r["log_offset"]) for r in status["readers"].values()), default=-1) + 1
        written = {name: int(w["offset"]) + 1 for name, w in status["writers"].items()}
        if self._base is None:
            self._base = {LOG: end, **written}
        base = self._base
        if end > base[LOG]:
            self.stages.update(LOG, end - base[LOG])
        for name, count in written.items():
            start = base.get(name, count)
            if end > start:
                note = "" if status["writers"][name]["running"] else "stopped"
                self.stages.update(f"writer:{name}", count - start, total=end - start, note=note)
