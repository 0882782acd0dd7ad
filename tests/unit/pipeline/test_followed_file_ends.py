"""A followed JSON-lines file (`follow: true`) with --exit-when-idle ends at the file's end instead of
polling for more lines (the reader's `until_caught_up`, set from PIPELINE_EXIT_WHEN_IDLE)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from app.pipeline.readers import build_source
from app.settings import Settings


async def read_all(path: Path, exit_when_idle: bool) -> list[str]:
    settings = Settings().model_copy(update={"pipeline_exit_when_idle": exit_when_idle})
    source = build_source("jsonl", settings, {"path": str(path), "follow": True, "poll_s": 0.01}, 4, 0.05)
    ids: list[str] = []
    try:
        async for batch in source.read({}):
            ids += [str(e.message.data["id"]) for e in batch if "id" in e.message.data]
            if len(ids) == 5 and not exit_when_idle:
                break  # following: it would poll for ever
    finally:
        await source.close()
    return ids


async def test_a_followed_file_ends_at_its_end_when_the_run_exits_when_idle(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"id": f"f{i}"}) + b"\n" for i in range(5)))
    assert await asyncio.wait_for(read_all(path, exit_when_idle=True), 10) == [f"f{i}" for i in range(5)]
    assert await asyncio.wait_for(read_all(path, exit_when_idle=False), 10) == [f"f{i}" for i in range(5)]
