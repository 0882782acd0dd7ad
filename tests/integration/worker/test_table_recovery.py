"""A worker killed with SIGKILL recovers every table update from the changelog, both when
replaced by a worker with an empty datadir and when it restarts on its own datadir.

The embedded broker's ListOffsets under-reports the end offset (last record batch's base
offset + 1); Faust still applies that whole last batch when it fetches it, and this test
keeps that true for the broker and Faust versions we pin.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from app.kafka.admin import KafkaAdmin, TopicSpec
from app.settings import Settings
from tests.support.spawn import spawn_logged

APP = Path(__file__).with_name("recovery_app.py")


def _start(home: Path, port: int, suffix: str, *, read_only: bool = False) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "HUBSTREAM_HOME": str(home),
        "WEB_PORT": str(port),
        "RECOVERY_SUFFIX": suffix,
        "HUBSTREAM_APP_ID": f"recovery-{suffix}",
        "BROKER_SESSION_TIMEOUT_S": "6",
        "BROKER_REBALANCE_TIMEOUT_S": "6",
        "PYTHONPATH": str(Path.cwd()),
    }
    if read_only:
        env["RECOVERY_READ_ONLY"] = "1"
    return spawn_logged([sys.executable, str(APP)], home / "worker.log", env=env)


def _table(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/latest/", timeout=5) as response:
        data: dict[str, int] = orjson.loads(response.read())
        return data


def _wait_for(port: int, expected: dict[str, int], timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    seen: dict[str, int] = {}
    while time.monotonic() < deadline:
        try:
            seen = _table(port)
        except OSError:
            seen = {}
        if seen == expected:
            return seen
        time.sleep(0.5)
    return seen


@pytest.mark.integration
def test_recovered_table_holds_the_newest_updates(stack: Settings, unique: str, tmp_path: Path) -> None:
    KafkaAdmin(stack.bootstrap).create([TopicSpec(f"recovery-in-{unique}", 1)])
    producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 20})
    expected: dict[str, int] = {}
    for i in range(3000):
        key = f"k{i % 40}"
        producer.produce(f"recovery-in-{unique}", key=key.encode(), value=orjson.dumps(i), partition=0)
        expected[key] = i
    producer.flush(30)

    first_home, second_home = tmp_path / "first", tmp_path / "second"
    first_home.mkdir()
    second_home.mkdir()
    first = _start(first_home, 6701, unique)
    try:
        assert _wait_for(6701, expected, 90) == expected, (first_home / "worker.log").read_text()[-3000:]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)

    second = _start(second_home, 6702, unique, read_only=True)
    try:
        recovered = _wait_for(6702, expected, 90)
        assert recovered == expected, (second_home / "worker.log").read_text()[-3000:]
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait(10)

    # The killed worker restarts on its own datadir: its persisted changelog offsets must
    # agree with the broker's end offsets (no ConsistencyError) and the table is complete.
    again = _start(first_home, 6703, unique, read_only=True)
    try:
        recovered = _wait_for(6703, expected, 90)
        assert recovered == expected, (first_home / "worker.log").read_text()[-3000:]
        assert again.poll() is None, "the restarted worker must stay up"
    finally:
        again.send_signal(signal.SIGKILL)
        again.wait(10)
