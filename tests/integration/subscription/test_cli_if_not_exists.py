"""`--if-not-exists` on `topic create` and `subscription create`, as the compose file's init
services run them on every `up`: a second run keeps what exists and exits 0; without the flag a
second create is refused with a message and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.subscription.conftest import Workers

ROOT = Path(__file__).resolve().parents[3]


def _run(workers: Workers, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        env=workers._env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_second_create_keeps_what_exists_only_when_asked(workers: Workers, unique: str) -> None:
    topic, sub = f"ine-{unique}", f"ine-sub-{unique}"
    create_topic = ("topic", "create", topic, "-p", "2")
    create_sub = ("subscription", "create", sub, "--topic", topic, "--http", "http://127.0.0.1:9/x")
    first_topic = workers.cli(*create_topic, "--if-not-exists")
    first_sub = workers.cli(*create_sub, "--shards", "2", "--no-start", "--if-not-exists")
    for args in (create_topic, create_sub):
        again = _run(workers, *args)
        assert again.returncode != 0 and again.stderr.startswith("error:"), again.stderr
        assert "already exists" in again.stderr, again.stderr
    assert workers.cli(*create_topic, "--if-not-exists") == first_topic
    kept = workers.cli(
        *create_sub, "--shards", "4", "--if-not-exists"
    )  # other options: the existing one stands
    assert kept == first_sub and kept["shard_count"] == 2, kept
