"""`--exit-when-idle` with the streaming readers: each is done once it caught up with what there
was when the run began (a binlog: the server's position then; a polling sync or a change feed: a
round that finds nothing new; a followed file: its end, tests/unit/pipeline). Before, these ran
until interrupted. A second binlog run resumes where the first ended and reads what came since."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pymysql
import pytest

from app.cosmos import CosmosStore
from app.settings import Settings

from .support import run_until_idle

pytestmark = pytest.mark.integration

Conn = pymysql.connections.Connection


def written_ids(target: Path) -> list[str]:
    lines = [orjson.loads(line) for line in target.read_bytes().splitlines()] if target.exists() else []
    return [str(w["data"]["id"]) for w in lines if "id" in (w.get("data") or {})]


def definition(name: str, reader: str, target: Path, batch_size: int) -> str:
    """A pipeline from `reader` (YAML flow mapping) to a JSON-lines file."""
    return (
        f"name: {name}\nbatch_size: {batch_size}\nbatch_wait_s: 0.05\nreader: {reader}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {target}}}\n"
    )


def run(file: Path, home: Path, text: str) -> None:
    file.write_text(text)
    done = run_until_idle(file, home)
    assert done.returncode == 0, done.stderr.decode()[-3000:]


@pytest.mark.timeout(300)
def test_a_binlog_reader_ends_at_the_position_the_server_had_at_start(
    stack: Settings, source: Conn, unique: str, tmp_path: Path
) -> None:
    table, db = f"idle_{unique}", stack.binlog_mysql.database
    with source.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id VARCHAR(16) PRIMARY KEY, n INT)")
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(f"s{i}", i) for i in range(5)])
    target, file = tmp_path / "out.jsonl", tmp_path / "p.yaml"
    text = definition(f"idle-binlog-{unique}", f"{{type: binlog, tables: '^{db}\\.{table}$'}}", target, 16)
    run(file, tmp_path, text)  # the snapshot, then the stream up to the position at start
    assert sorted(written_ids(target)) == [f"s{i}" for i in range(5)]
    with source.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(f"b{i}", i) for i in range(4)])
        cur.execute(f"DELETE FROM {table} WHERE id = 's0'")
    run(file, tmp_path, text)  # resumes from the first run's position: streams the changes since
    ids = written_ids(target)
    assert sorted(set(ids)) == sorted({*(f"s{i}" for i in range(5)), *(f"b{i}" for i in range(4))})
    ops = [orjson.loads(line)["op"] for line in target.read_bytes().splitlines()]
    assert "delete" in ops


@pytest.mark.timeout(300)
def test_a_polling_sync_ends_once_a_round_finds_nothing_new(
    stack: Settings, mysql: Conn, unique: str, tmp_path: Path
) -> None:
    table = f"poll_{unique}"
    with mysql.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id VARCHAR(16) PRIMARY KEY, v BIGINT)")
        cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s)", [(f"r{i}", i) for i in range(6)])
    target, file = tmp_path / "out.jsonl", tmp_path / "p.yaml"
    reader = f"{{type: mysql, poll_s: 0.2, tables: [{{name: {table}, sync_column: v}}]}}"
    text = definition(f"idle-poll-{unique}", reader, target, 4)
    try:
        run(file, tmp_path, text)  # the copy, then sync rounds until one finds nothing new
        assert sorted(written_ids(target)) == sorted(f"r{i}" for i in range(6))
    finally:
        with mysql.cursor() as cur:
            cur.execute(f"DROP TABLE `{table}`")


@pytest.mark.timeout(300)
async def test_a_change_feed_reader_ends_once_a_round_finds_nothing_new(
    stack: Settings, cosmos: CosmosStore, unique: str, tmp_path: Path
) -> None:
    container = await cosmos.container(f"idle-{unique}", "/pk")
    for i in range(7):
        await container.create_item({"id": f"c{i}", "pk": "p"})
    target, file = tmp_path / "out.jsonl", tmp_path / "p.yaml"
    reader = f"{{type: cosmos, container: idle-{unique}, database: {cosmos.database.id}, poll_s: 0.2}}"
    text = definition(f"idle-feed-{unique}", reader, target, 4)
    await asyncio.to_thread(run, file, tmp_path, text)
    assert sorted(written_ids(target)) == [f"c{i}" for i in range(7)]
