"""The ingest job's text progress: at most a line per interval, and always the completion."""

from __future__ import annotations

import io

from rich.console import Console

from app.progress import Stages
from spark_ingest.batch import BatchState
from spark_ingest.progress import INGEST_STAGES, StageProgress, TextProgress


def _state(complete: bool, pending: int | None = 5) -> BatchState:
    return BatchState("7", complete, True, None, pending, None if pending is None else 10)


def test_lines_are_throttled_but_the_completion_always_shows() -> None:
    lines: list[str] = []
    progress = TextProgress(lines.append, interval_s=3600)
    progress.tasks("producing", 1, 4)
    progress.batch(_state(False))
    assert lines == [], "nothing within the first interval"
    progress.batch(_state(True, pending=0))
    assert lines == ["batch 7: complete=True, 10 of 10 acked after 0 s"]


def test_every_call_reports_with_a_zero_interval() -> None:
    lines: list[str] = []
    progress = TextProgress(lines.append, interval_s=0)
    progress.tasks("producing", 1, 4)
    progress.batch(_state(False, pending=None))
    assert lines[0].startswith("producing: 1/4 tasks done")
    assert lines[1].startswith("batch 7: complete=False after"), "no ack count when the API gave none"


def test_stage_progress_ends_each_job_when_the_next_reports() -> None:
    with Stages(Console(file=io.StringIO(), force_terminal=False), INGEST_STAGES) as stages:
        progress = StageProgress(stages)
        progress.tasks("counting valid rows", 1, 4)
        progress.tasks("producing", 2, 4)
        figures = stages.figures()
        assert (figures["counting valid rows"].count, figures["producing"].count) == (4, 2)
        progress.batch(_state(False, pending=4))
        assert stages.figures()["producing"].count == 4, "producing ended: the batch was closed"
        assert (stages.figures()["acked"].count, stages.figures()["acked"].total) == (6, 10)
