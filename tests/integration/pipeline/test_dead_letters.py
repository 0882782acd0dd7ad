"""`errors_tolerance: all` through the real pipeline process: a JSON-lines reader, a transform that
raises for chosen rows and one that gives other rows a value MySQL has no literal for (NaN), a
MySQL writer. Afterwards the dead-letter topic holds exactly those rows' commit-log records with
their context headers, and the table holds every other row; also after a kill -9 right when the
broker confirmed the first dead letters (each then at least once, at most twice)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
from confluent_kafka import Consumer, TopicPartition

from app.kafka.broker import broker_for
from app.pipeline.kafka_log import PipelineTopics
from app.pipeline.model import decode_entry
from app.pipeline.tolerance import dead_letter_context
from app.settings import Settings

from .support import HUBSTREAM, free_port

pytestmark = pytest.mark.integration

ROWS = 60
POISON = {4, 17, 18, 41}  # the transform raises
NAN = {9, 30, 59}  # the transform sets seq to NaN: the MySQL writer cannot build its statement
TRANSFORMS = """
def refuse_poison(message):
    if message.data.get("poison"):
        raise ValueError(f"poison row {message.data['id']}")
    return message


def nan_seq(message):
    if message.data.get("nan"):
        return message.with_data({**message.data, "seq": float("nan")})
    return message
"""


def run_pipeline(file: Path, home: Path, port: int, **extra_env: str) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "HUBSTREAM_HOME": str(home),
        "WEB_PORT": str(port),
        "BROKER_SESSION_TIMEOUT_S": "6",
        "BROKER_REBALANCE_TIMEOUT_S": "6",
        **extra_env,
    }
    return subprocess.run(
        [HUBSTREAM, "pipeline", "run", str(file), "--exit-when-idle", "--loglevel", "warning"],
        env=env,
        capture_output=True,
        timeout=240,
    )


def read_topic(settings: Settings, topic: str) -> list[tuple[bytes | None, bytes, dict[str, str]]]:
    end = broker_for(settings).end_offsets([(topic, 0)])[0]
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": f"{topic}-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes | None, bytes, dict[str, str]]] = []
    try:
        while len(out) < end:
            for msg in consumer.consume(100, 1.0):
                assert msg.error() is None, msg.error()
                out.append((msg.key(), msg.value(), dead_letter_context(msg.headers())))
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(420)
@pytest.mark.parametrize("crash", [False, True], ids=["clean", "killed-at-dlq"])
def test_failing_rows_go_to_the_dead_letter_topic_and_the_rest_to_mysql(
    stack: Settings,
    mysql: pymysql.connections.Connection[Any],
    unique: str,
    tmp_path: Path,
    crash: bool,
) -> None:
    name, table = f"dlq-{unique}", f"dlq_{unique}"
    with mysql.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id VARCHAR(64) PRIMARY KEY, seq DOUBLE)")
    rows = [
        {
            "id": f"d{i}",
            "seq": i,
            **({"poison": True} if i in POISON else {}),
            **({"nan": True} if i in NAN else {}),
        }
        for i in range(ROWS)
    ]
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    (tmp_path / "transforms.py").write_text(TRANSFORMS)
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 8\nbatch_wait_s: 0.05\n"
        f"reader: {{type: jsonl, path: {source}, namespace: docs}}\n"
        "writers:\n"
        f"  - name: db\n    type: mysql\n    table: {table}\n    columns: [id, seq]\n"
        "    errors_tolerance: all\n"
        "    transforms: ['transforms.py:refuse_poison', 'transforms.py:nan_seq']\n"
    )
    port = free_port()
    if crash:
        killed = run_pipeline(file, tmp_path, port, HUBSTREAM_CRASH_AT="pipeline.dlq.confirmed:1:kill")
        assert killed.returncode == -9, killed.stderr.decode()[-3000:]
    done = run_pipeline(file, tmp_path, port)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    with mysql.cursor() as cur:
        cur.execute(f"SELECT id, seq FROM `{table}`")
        stored = {r[0]: float(r[1]) for r in cur.fetchall()}
    assert stored == {f"d{i}": float(i) for i in range(ROWS) if i not in POISON | NAN}

    letters = read_topic(stack, PipelineTopics.of(name, stack.app_id).dlq)
    copies = Counter(int(h["hs-log-offset"]) for _, _, h in letters)
    assert set(copies) == POISON | NAN  # line i+1 is commit-log offset i
    assert max(copies.values()) <= (2 if crash else 1)
    for key, value, headers in letters:
        offset = int(headers["hs-log-offset"])
        assert key == f"docs\x00d{offset}".encode()
        entry = decode_entry(offset, value)
        assert entry.value.data == rows[offset]  # the original entry, as read from the commit log
        assert orjson.loads(headers["hs-source-position"]) == {"line": offset + 1}
        assert headers["hs-pipeline"] == name and headers["hs-writer"] == "db"
        assert int(headers["hs-failed-ms"]) > 0
        if offset in POISON:
            assert headers["hs-stage"] == "transform"
            assert headers["hs-step"] == "transforms.py:refuse_poison"
            assert headers["hs-error-class"] == "ValueError"
            assert headers["hs-error"] == f"poison row d{offset}"
        else:
            assert headers["hs-stage"] == "convert" and "hs-step" not in headers
            assert headers["hs-error-class"] == "ProgrammingError" and "nan" in headers["hs-error"]
