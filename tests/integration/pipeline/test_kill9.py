"""Pipelines as subprocesses (`hubstream pipeline run FILE`) killed with SIGKILL mid-run against
the real broker, MariaDB and Cosmos endpoint: afterwards the target holds exactly the source rows."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.cosmos import CosmosStore
from app.settings import Settings
from tests.support.waiting import async_wait_until

from .support import cli, free_port, start, status, stop, wait

pytestmark = pytest.mark.integration
# Slows a writer down so a kill lands mid-run, after a flush and before the end.
THROTTLE = """
import time

def throttle(message):
    time.sleep({seconds})
    return message
"""


def flushed_offset(name: str) -> int:
    """The writer offset the pipeline has flushed (as `pipeline status` reports it), -1 before any."""
    done = cli("status", name)
    if done.returncode != 0:
        return -1
    writers = orjson.loads(done.stdout)["writers"]
    return max((int(w["offset"]) for w in writers.values()), default=-1)


def count(conn: pymysql.connections.Connection[Any], table: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{table}`")
        return int(cur.fetchone()[0])


def test_composite_to_mysql_survives_kill9(
    stack: Settings,
    metadata: MetadataStore,
    mysql: pymysql.connections.Connection[Any],
    unique: str,
    tmp_path: Path,
) -> None:
    name, topic, table, n = f"k9mysql-{unique}", f"plsrc-{unique}", f"pl_da_{unique}", 2000
    metadata.create(topic, 2)
    with mysql.cursor() as cur:
        cur.execute(
            f"CREATE TABLE `{table}` (id VARCHAR(64) PRIMARY KEY, recipient VARCHAR(64), weight INT,"
            " writes INT NOT NULL DEFAULT 1)"
        )  # `writes` counts deliveries of a row: a redelivered upsert updates it
        cur.execute(
            f"CREATE TRIGGER `{table}_writes` BEFORE UPDATE ON `{table}` FOR EACH ROW"
            " SET NEW.writes = OLD.writes + 1"
        )
    ids = [f"ev-{i}" for i in range(2 * n)]

    def produce(first: int, last: int) -> None:
        with CompositeProducer(stack, topic, store=metadata) as producer:
            for i in range(first, last):
                producer.produce(f"r{i % 7}", {"id": ids[i], "recipient": f"r{i % 7}", "weight": i})

    produce(0, n)
    (tmp_path / "throttle.py").write_text(THROTTLE.format(seconds=0.002))
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 100\nreader: {{type: composite, topic: {topic}}}\n"
        f"writers:\n  - {{name: db, type: mysql, table: {table}, columns: [id, recipient, weight],"
        " transforms: ['throttle.py:throttle']}\n"
    )
    port = free_port()
    proc = start(file, tmp_path, port)
    try:
        wait(lambda: flushed_offset(name) >= 0, 90, "a first offset flush")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        committed, rows_at_kill = flushed_offset(name), count(mysql, table)
        # The kill landed between two flushes, mid-run: the sink holds at least the flushed rows.
        assert 0 <= committed < rows_at_kill <= n or 0 <= committed + 1 == rows_at_kill < n
        datadir = tmp_path / "data" / f"worker-{port}"
        assert any(datadir.rglob("*")), "the killed run left its RocksDB datadir"
        produce(n, 2 * n)
        proc = start(file, tmp_path, port)  # the same home and port: restarts on its own datadir
        wait(lambda: count(mysql, table) >= 2 * n, 120, "every row")
        wait(lambda: flushed_offset(name) == 2 * n - 1, 30, "the final offset")
        assert proc.poll() is None, "the restarted pipeline must stay up"
        assert stop(proc) == 0
    finally:
        stop(proc)
    with mysql.cursor() as cur:
        cur.execute(f"SELECT id, weight, writes FROM `{table}`")
        rows = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
    assert sorted(rows) == sorted(ids)
    assert all(rows[f"ev-{i}"][0] == i for i in range(2 * n))
    # Redelivery only since the last flush: at most the rows written after the committed offset.
    redelivered = sum(writes - 1 for _, writes in rows.values())
    assert 0 <= redelivered <= rows_at_kill - (committed + 1)
    report = status(name)
    assert report["commitLog"]["endOffset"] == 2 * n  # the reader did not append anything twice
    assert report["writers"]["db"]["offset"] == 2 * n - 1 and report["writers"]["db"]["lag"] == 0


async def test_mysql_to_cosmos_survives_kill9(
    stack: Settings,
    cosmos: CosmosStore,
    mysql: pymysql.connections.Connection[Any],
    unique: str,
    tmp_path: Path,
) -> None:
    name, table, container, n = f"k9cosmos-{unique}", f"pl_src_{unique}", f"pl-{unique}", 1200
    with mysql.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(64))")
        cur.executemany(f"INSERT INTO `{table}` (name) VALUES (%s)", [(f"n{i}",) for i in range(n)])
    # 10 ms a message: about 12 s for the whole table, so the kill lands mid-run (the status
    # probe is a CLI subprocess that takes about a second).
    (tmp_path / "throttle.py").write_text(THROTTLE.format(seconds=0.01))
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 100\n"
        f"reader: {{type: mysql, tables: [{{name: {table}, sync_column: id}}], poll_s: 0.2}}\n"
        f"writers:\n  - {{name: docs, type: cosmos, container: {container}, database: {cosmos.database.id},"
        f" partition_key: /id, transforms: ['throttle.py:throttle']}}\n"
    )
    target = await cosmos.container(container, "/id")

    async def docs() -> set[str]:
        return {item["id"] async for item in target.read_all_items()}

    port = free_port()
    proc = start(file, tmp_path, port)
    try:

        async def flushed() -> bool:
            return await asyncio.to_thread(flushed_offset, name) >= 0

        await async_wait_until(flushed, 90, "an offset flushed before the kill", poll_s=0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        committed = await asyncio.to_thread(flushed_offset, name)
        assert committed >= 0 and len(await docs()) < n, "the kill must land mid-run, after a flush"
        with mysql.cursor() as cur:  # rows added while down arrive through sync
            cur.executemany(f"INSERT INTO `{table}` (name) VALUES (%s)", [(f"late{i}",) for i in range(100)])
        proc = start(file, tmp_path, port)

        async def caught_up() -> bool:
            return len(await docs()) >= n + 100

        await async_wait_until(caught_up, 120, "the target to catch up", poll_s=0.5)
        assert proc.poll() is None, "the restarted pipeline must stay up"
        assert await asyncio.to_thread(stop, proc) == 0
    finally:
        stop(proc)
    with mysql.cursor() as cur:
        cur.execute(f"SELECT id FROM `{table}`")
        source = {str(r[0]) for r in cur.fetchall()}
    assert await docs() == source
