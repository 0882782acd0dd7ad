"""An operator `mark` that arrives while the pipeline starts (after the offsets table was read,
before the runtime runs) is applied once the runtime runs. Before, it was written to the table
the runtime had already read, and the next offset flush overwrote it: lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.pipeline.definition import load_definition
from app.pipeline.engine import PipelineRuntime
from app.pipeline.service import PipelineHost, ensure_topics
from app.settings import Settings
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
async def test_a_mark_sent_while_the_pipeline_starts_is_applied(
    stack: Settings, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"")  # nothing to read: only the mark can move the writer
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: starting-{unique}\n"
        f"reader: {{type: jsonl, path: {source}, namespace: docs}}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {tmp_path / 'out.jsonl'}}}\n"
    )
    settings = stack.model_copy(update={"app_id": f"pl-starting-{unique}", "home": tmp_path})
    host = PipelineHost(settings, load_definition(file))
    ensure_topics(settings, host.topics)

    starting, proceed = asyncio.Event(), asyncio.Event()
    real_start = PipelineRuntime.start

    async def held_start(runtime: PipelineRuntime) -> None:
        starting.set()
        await proceed.wait()
        await real_start(runtime)

    monkeypatch.setattr(PipelineRuntime, "start", held_start)
    table: dict[str, Any] = {}
    running = asyncio.create_task(host.run(table))
    try:
        await asyncio.wait_for(starting.wait(), 60)
        await host.apply(table, {"kind": "mark", "writer": "file", "offset": 7}, 0)
        proceed.set()
        await async_wait_until(
            lambda: host.runtime is not None and host.runtime.slots["file"].state.offset == 7,
            30,
            "the mark to be applied",
            poll_s=0.05,
        )
    finally:
        await host.shutdown()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
