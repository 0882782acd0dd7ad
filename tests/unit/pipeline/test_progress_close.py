"""`pipeline run --progress`'s closing table counts what the writers confirmed, even when their last
writes landed after the live view's last update (an idle stop: CI once showed 'written: 0 of 11')."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from rich.console import Console

from app.pipeline.definition import definition_from_mapping
from app.pipeline.memory import MemoryStateStore
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.progress_view import PipelineProgress
from app.pipeline.service import PipelineHost
from app.settings import Settings

from .helpers import RecordingSink, fill_log, runtime, wait_for


async def test_the_closing_table_counts_writes_confirmed_after_the_last_update(tmp_path: Path) -> None:
    definition = definition_from_mapping(
        {
            "name": "closing",
            "reader": {"type": "jsonl", "path": str(tmp_path / "in.jsonl"), "namespace": "docs"},
            "writers": [{"name": "w", "type": "jsonl", "path": str(tmp_path / "out.jsonl")}],
        },
        tmp_path,
    )
    log, sink = await fill_log("abc"), RecordingSink()
    run = runtime(log, MemoryStateStore(), {"w": sink}, {"w": WriterState()})
    run.readers["docs"] = ReaderState(log_offset=2)  # the reader appended offsets 0..2
    shown = StringIO()
    host = PipelineHost(Settings(), definition)
    host.progress = PipelineProgress(Console(file=shown, width=200), definition).__enter__()
    host.progress.show(run.status())  # the base, and the view's last update: nothing written yet
    await run.start()
    host.runtime = run
    await wait_for(lambda: sink.received == [0, 1, 2], what="the writer confirmed all three")

    await host.shutdown()

    assert "writer w: written: 3 in" in shown.getvalue(), shown.getvalue()
