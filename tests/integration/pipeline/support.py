"""Helpers for the pipeline integration tests: run `hubstream pipeline ...` as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings
from tests.support.ports import free_port
from tests.support.spawn import spawn_logged
from tests.support.waiting import wait_until

__all__ = [
    "HUBSTREAM",
    "cli",
    "cli_json",
    "composite_with",
    "free_port",
    "run_until_idle",
    "start",
    "status",
    "stop",
    "wait",
]

HUBSTREAM = str(Path(sys.executable).with_name("hubstream"))


def start(file: Path, home: Path, port: int, **extra_env: str) -> subprocess.Popen[bytes]:
    """`hubstream pipeline run FILE` with its own home (datadir) and HTTP API port; output to
    home/run-*.log."""
    env = {
        **os.environ,
        "HUBSTREAM_HOME": str(home),
        "PIPELINE_WEB_PORT": str(port),
        "BROKER_SESSION_TIMEOUT_S": "6",
        "BROKER_REBALANCE_TIMEOUT_S": "6",
        **extra_env,
    }
    return spawn_logged(
        [HUBSTREAM, "pipeline", "run", str(file), "--loglevel", "warning"],
        home / f"run-{time.monotonic_ns()}.log",
        env=env,
        append=False,
    )


def run_until_idle(file: Path, home: Path) -> subprocess.CompletedProcess[bytes]:
    """`hubstream pipeline run FILE --exit-when-idle`, to its end (a home and web port of its own)."""
    env = {**os.environ, "HUBSTREAM_HOME": str(home), "PIPELINE_WEB_PORT": str(free_port())}
    return subprocess.run(
        [HUBSTREAM, "pipeline", "run", str(file), "--exit-when-idle", "--loglevel", "warning"],
        env=env,
        capture_output=True,
        timeout=240,
    )


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> int:
    """Clean shutdown (SIGTERM): writers commit and offsets are flushed; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    wait_until(predicate, timeout_s, what, poll_s=0.2)


def cli(*args: str, port: int | None = None) -> subprocess.CompletedProcess[bytes]:
    """`hubstream pipeline ARGS`, talking to the pipeline process on `port` when given."""
    url = ["--url", f"http://127.0.0.1:{port}"] if port else []
    return subprocess.run([HUBSTREAM, "pipeline", *url, *args], capture_output=True, timeout=60)


def cli_json(*args: str, port: int | None = None) -> Any:
    done = cli(*args, port=port)
    assert done.returncode == 0, (args, done.stderr.decode())
    return orjson.loads(done.stdout)


def status(name: str, port: int | None = None) -> dict[str, Any]:
    report: dict[str, Any] = cli_json("status", name, port=port)
    return report


def composite_with(
    stack: Settings, metadata: MetadataStore, name: str, partitions: int, messages: int, groups: int
) -> None:
    """A composite topic holding `messages` records {"id": "m<i>", "i": i} over `groups` groups."""
    metadata.create(name, partitions)
    with CompositeProducer(stack, name, store=metadata) as producer:
        for i in range(messages):
            producer.produce(f"g{i % groups}", {"id": f"m{i}", "i": i})
