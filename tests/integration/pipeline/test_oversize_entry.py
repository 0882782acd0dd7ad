"""A source entry larger than a commit-log record may be (MAX_PAYLOAD_BYTES) is left out and
reported, and everything else reaches the writers. Before, the append failed whole: the reader
retried it every 5 s for ever, and the records of the batch sent before it were appended again
on every try."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.settings import Settings

from .support import run_until_idle

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_an_entry_over_the_record_limit_is_left_out_and_reported(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"id": f"d{i}", **({"blob": "x" * 1_200_000} if i == 5 else {})} for i in range(10)]
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: big-{unique}\nbatch_size: 20\n"
        f"reader: {{type: jsonl, path: {source}, namespace: docs}}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {target}}}\n"
    )
    done = run_until_idle(file, tmp_path)
    said = done.stderr.decode()
    assert done.returncode == 0, said[-3000:]
    assert "left out: an entry of" in said and "raise MAX_PAYLOAD_BYTES" in said, said[-3000:]
    lines = [orjson.loads(line) for line in target.read_bytes().splitlines()]
    written = [line["data"]["id"] for line in lines if line["op"] == "insert"]
    assert written == [f"d{i}" for i in range(10) if i != 5]  # each once, in order
