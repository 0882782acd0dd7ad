"""`hubstream pipeline run --exit-when-idle` says whether everything reached every writer: exit 0
when all writers caught up, non-zero with a message when a writer stopped on a failure (before,
it exited 0 either way, so a script could not tell)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import orjson
import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.pipeline.service import WRITER_FAILED_EXIT
from app.settings import Settings

from .support import HUBSTREAM, free_port, run_until_idle

pytestmark = pytest.mark.integration

TRANSFORM = """
def refuse_poison(message):
    if message.data.get("poison"):
        raise ValueError(f"poison message {message.data['id']}")
    return message
"""


def run_idle(tmp_path: Path, name: str, poison: bool, *options: str) -> subprocess.CompletedProcess[bytes]:
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"id": f"d{i}", **({"poison": True} if poison and i == 5 else {})} for i in range(10)]
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    (tmp_path / "transforms.py").write_text(TRANSFORM)
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 4\nbatch_wait_s: 0.05\n"
        f"reader: {{type: jsonl, path: {source}, namespace: docs}}\n"
        "writers:\n"
        f"  - {{name: file, type: jsonl, path: {target}, transforms: ['transforms.py:refuse_poison']}}\n"
    )
    # A worker's WEB_PORT in the environment, on a port that is taken (as `hubstream run` starts
    # its mirror pipeline): the pipeline process must still serve on PIPELINE_WEB_PORT.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {
            **os.environ,
            "HUBSTREAM_HOME": str(tmp_path),
            "PIPELINE_WEB_PORT": str(free_port()),
            "WEB_PORT": str(taken.getsockname()[1]),
        }
        return subprocess.run(
            [HUBSTREAM, "pipeline", "run", str(file), "--exit-when-idle", "--loglevel", "warning", *options],
            env=env,
            capture_output=True,
            timeout=240,
        )


@pytest.mark.timeout(300)
def test_exit_when_idle_is_non_zero_when_a_writer_failed(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    done = run_idle(tmp_path, f"idle-bad-{unique}", poison=True)
    assert done.returncode == WRITER_FAILED_EXIT, done.stderr.decode()[-3000:]
    assert b"failed writer" in done.stderr


@pytest.mark.timeout(300)
def test_exit_when_idle_is_zero_when_every_writer_caught_up(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    done = run_idle(tmp_path, f"idle-ok-{unique}", False, "--progress")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    # The progress view's stage lines and table (stderr is not a terminal: a line per finished
    # stage): 11 entries (10 lines and the end-of-copy marker), all written by the one writer.
    shown = done.stderr.decode()
    assert "reader: entries in the commit log: 11 in" in shown, shown[-3000:]
    assert "writer file: written: 11 in" in shown, shown[-3000:]
    lines = [orjson.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    written = [line["data"]["id"] for line in lines if line["op"] == "insert"]
    assert written == [f"d{i}" for i in range(10)]


@pytest.mark.timeout(300)
def test_exit_when_idle_ends_a_composite_reader_at_the_end_it_saw_at_start(
    stack: Settings, metadata: MetadataStore, unique: str, tmp_path: Path
) -> None:
    """A streaming reader is done once it read every partition to the end it had when the run
    began. Before, a composite-topic reader never ended and the process ran until interrupted."""
    topic = f"idle-src-{unique}"
    metadata.create(topic, 3)
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for i in range(50):
            producer.produce(f"g{i % 7}", orjson.dumps({"id": f"d{i}"}))
    target = tmp_path / "out.jsonl"
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: idle-composite-{unique}\nbatch_size: 16\nbatch_wait_s: 0.05\n"
        f"reader: {{type: composite, topic: {topic}, namespace: docs}}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {target}}}\n"
    )
    done = run_until_idle(file, tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    written = [orjson.loads(line) for line in target.read_bytes().splitlines()]
    assert sorted(w["data"]["id"] for w in written if "id" in w.get("data", {})) == sorted(
        f"d{i}" for i in range(50)
    )
