"""The stage board of the main job: counts, totals, seconds and the lines a log shows."""

from __future__ import annotations

import io

from rich.console import Console

from app.progress import Stages

STAGES = (("spark", "Spark → topic"), ("hub", "hub saved"), ("drain", "actors drained"))


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=120), out


def test_a_stage_counts_from_its_first_update_and_stops_at_finish() -> None:
    console, out = _console()
    with Stages(console, STAGES) as stages:
        stages.update("spark", 10, 100)
        stages.update("spark", 100)  # the total is kept once known
        stages.finish("spark")
        stages.update("spark", 5)  # after finish: ignored
        stages.update("hub", 40, 100)
    figures = stages.figures()
    assert set(figures) == {"spark", "hub"}, "a stage never updated has no figures"
    assert (figures["spark"].count, figures["spark"].total) == (100, 100)
    assert (figures["hub"].count, figures["hub"].total) == (40, 100)
    assert figures["spark"].seconds >= 0
    assert "Spark → topic: 100 in" in out.getvalue(), "a log shows a line when a stage finishes"


def test_a_log_gets_one_line_per_finished_stage_and_no_bars() -> None:
    console, out = _console()
    with Stages(console, STAGES) as stages:
        stages.update("spark", 100, 100)
        stages.finish("spark")
        stages.update("hub", 40, 100)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert lines[0].startswith("  Spark → topic: 100 in"), lines
    assert lines[1].startswith("  hub saved: 40 in"), lines
    assert len(lines) == 2, f"bars were drawn into a log: {lines}"


def test_finish_of_a_stage_never_started_does_nothing() -> None:
    console, out = _console()
    with Stages(console, STAGES) as stages:
        stages.finish("drain")
    assert stages.figures() == {}
    assert "actors drained:" not in out.getvalue()


def test_the_summary_table_lists_started_stages_in_order() -> None:
    console, _ = _console()
    with Stages(console, STAGES) as stages:
        stages.update("hub", 3, 4)
        stages.update("spark", 4, 4)
        stages.finish("spark")
    table = io.StringIO()
    Console(file=table, force_terminal=False, width=120).print(stages.table())
    text = table.getvalue()
    assert text.index("Spark → topic") < text.index("hub saved"), "stages keep their declared order"
    assert "actors drained" not in text


def test_the_timeline_places_each_stage_after_the_job_start() -> None:
    from app.progress import StageFigures, stage_timeline

    figures = {
        "spark": StageFigures("spark", "Spark → topic", 10, 10, started_at=105.0, ended_at=111.5),
        "hub": StageFigures("hub", "hub saved", 4, 10, started_at=106.25, ended_at=None),
    }
    assert stage_timeline(figures, since=100.0) == {"spark": [5.0, 11.5], "hub": [6.25, None]}
