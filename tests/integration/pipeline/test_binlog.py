"""Binlog change capture through a real pipeline process: the project's own MariaDB (row-based
binlog) as the source, MariaDB and a JSON-lines file as targets, a kill -9 in the middle.
Afterwards both targets equal the source row for row: inserts, updates, deletes, and a row
whose transaction committed after rows with higher keys (a poller on the key would miss it)."""

from __future__ import annotations

import datetime as dt
import signal
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from app.settings import Settings

from .support import cli, free_port, start, stop, wait

pytestmark = pytest.mark.integration

THROTTLE = """
import time

def throttle(message):
    time.sleep(0.004)
    return message
"""
COLUMNS = "id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(64), qty INT, price DECIMAL(8,2), at DATETIME(3)"
Row = tuple[str, int, str, str]
LATE_ARGS: dict[str, Any] = {}  # the source server, for a second connection


def _row(name: str, qty: Any, price: Any, at: Any) -> Row:
    at_text = at.isoformat() if isinstance(at, dt.datetime) else str(at)
    return (str(name), int(qty), str(price), at_text)


def table_rows(conn: pymysql.connections.Connection[Any], table: str) -> dict[int, Row]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, name, qty, price, at FROM {table}")
        return {int(r[0]): _row(*r[1:]) for r in cur.fetchall()}


def file_rows(path: Path) -> dict[int, Row]:
    """The file's lines applied in order: what a consumer of the file rebuilds."""
    rows: dict[int, Row] = {}
    if not path.exists():
        return rows
    for line in path.read_bytes().splitlines():
        item = orjson.loads(line)
        data = item["data"]
        if item["op"] == "delete":
            rows.pop(int(data["id"]), None)
        elif item["op"] in ("insert", "update"):
            rows[int(data["id"])] = _row(data["name"], data["qty"], data["price"], data["at"])
    return rows


def flushed_offset(name: str) -> int:
    done = cli("status", name)
    if done.returncode != 0:
        return -1
    writers = orjson.loads(done.stdout)["writers"]
    return min((int(w["offset"]) for w in writers.values()), default=-1)


def changes(conn: pymysql.connections.Connection[Any], table: str, round_: int) -> None:
    """Inserts, updates, deletes, and a transaction that commits after a later one."""
    at = dt.datetime(2026, 1, 1, 12, 0, 0, 123000) + dt.timedelta(days=round_)
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table} (name, qty, price, at) VALUES (%s, %s, %s, %s)",
            [(f"r{round_}-{i}", i, Decimal(i) / 4, at) for i in range(150)],
        )
        cur.execute(f"SELECT id FROM {table} ORDER BY id")
        ids = [r[0] for r in cur.fetchall()]
        cur.execute(
            f"UPDATE {table} SET qty = qty + 1000, name = CONCAT(name, '+') WHERE id IN %s", [ids[::7]]
        )
        cur.execute(f"DELETE FROM {table} WHERE id IN %s", [ids[3::11]])
        cur.execute(f"UPDATE {table} SET price = price + 1 WHERE id IN %s", [ids[5::13]])
    late = pymysql.connect(**LATE_ARGS)
    try:
        with late.cursor() as slow:
            slow.execute("BEGIN")
            slow.execute(
                f"INSERT INTO {table} (name, qty, price, at) VALUES ('late-{round_}', 7, 7.5, %s)", [at]
            )
            with conn.cursor() as cur:  # higher keys commit first
                cur.executemany(
                    f"INSERT INTO {table} (name, qty, price, at) VALUES (%s, 1, 1, %s)",
                    [(f"after-late-{round_}-{i}", at) for i in range(5)],
                )
            slow.execute("COMMIT")
    finally:
        late.close()


def test_binlog_capture_to_mysql_and_file_survives_kill9(
    stack: Settings,
    source: pymysql.connections.Connection[Any],
    mysql: pymysql.connections.Connection[Any],
    unique: str,
    tmp_path: Path,
) -> None:
    name, table = f"cdc-{unique}", f"cdc_{unique}"
    src_db = stack.binlog_mysql.database
    LATE_ARGS.update(stack.binlog_mysql.connect_args())
    with source.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} ({COLUMNS})")
    with mysql.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} ({COLUMNS})")
    changes(source, table, 0)  # rows before the pipeline starts: the snapshot's
    (tmp_path / "throttle.py").write_text(THROTTLE)
    out = tmp_path / "out" / "rows.jsonl"
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 50\n"
        f"reader: {{type: binlog, tables: '^{src_db}\\.{table}$'}}\n"
        "writers:\n"
        f"  - {{name: db, type: mysql, table: {table}, columns: [id, name, qty, price, at],"
        " transforms: ['throttle.py:throttle']}\n"
        f"  - {{name: file, type: jsonl, path: {out}}}\n"
    )
    port = free_port()
    proc = start(file, tmp_path, port)
    try:
        changes(source, table, 1)  # while the snapshot is read
        wait(lambda: flushed_offset(name) >= 0, 90, "a first offset flush")
        changes(source, table, 2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert table_rows(mysql, table) != table_rows(source, table), "the kill must land mid-run"
        changes(source, table, 3)  # while the pipeline is down
        proc = start(file, tmp_path, port)
        want = table_rows(source, table)
        wait(lambda: table_rows(mysql, table) == want, 120, "the MySQL target to equal the source")
        wait(lambda: file_rows(out) == want, 30, "the file to equal the source")
        changes(source, table, 4)  # and capture goes on after the restart
        want = table_rows(source, table)
        wait(lambda: table_rows(mysql, table) == want and file_rows(out) == want, 60, "the last changes")
        assert proc.poll() is None, "the restarted pipeline must stay up"
        assert stop(proc) == 0
    finally:
        stop(proc)
    assert table_rows(mysql, table) == table_rows(source, table)
    assert any(r[0].startswith("late-") for r in want.values())
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    deletes = [item for item in lines if item["op"] == "delete"]
    updates = [item for item in lines if item["op"] == "update"]
    assert deletes and all(item["data"] == item["before"] for item in deletes)
    assert updates and all(item["before"]["id"] == item["data"]["id"] for item in updates)
