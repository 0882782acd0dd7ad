"""Binlog capture of what the first capture test does not write: a SET column (the binlog library
hands it over as a Python set, which the commit log could not encode: the reader retried the same
rows for ever) and an UPDATE that changes the primary key (the mirror kept the old row beside the
new one). Counted in the targets, a MariaDB table and a JSON-lines file, against the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from app.settings import Settings

from .support import free_port, start, stop, wait

pytestmark = pytest.mark.integration

COLUMNS = "id INT PRIMARY KEY, tags SET('red', 'green', 'blue'), note VARCHAR(32)"
Row = tuple[frozenset[str], str]


def _row(tags: Any, note: Any) -> Row:
    return frozenset(t for t in str(tags or "").split(",") if t), str(note)


def table_rows(conn: pymysql.connections.Connection[Any], table: str) -> dict[int, Row]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, tags, note FROM {table}")
        return {int(r[0]): _row(r[1], r[2]) for r in cur.fetchall()}


def file_rows(path: Path) -> dict[int, Row]:
    """The file's lines applied in order: what a consumer of the file rebuilds."""
    rows: dict[int, Row] = {}
    for line in path.read_bytes().splitlines() if path.exists() else ():
        item = orjson.loads(line)
        data = item["data"]
        if item["op"] == "delete":
            rows.pop(int(data["id"]), None)
        else:
            rows[int(data["id"])] = _row(data["tags"], data["note"])
    return rows


def execute(conn: pymysql.connections.Connection[Any], *statements: str) -> None:
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def test_set_columns_and_key_changes_reach_the_targets_as_in_the_source(
    stack: Settings,
    source: pymysql.connections.Connection[Any],
    mysql: pymysql.connections.Connection[Any],
    unique: str,
    tmp_path: Path,
) -> None:
    name, table = f"cdcv-{unique}", f"cdcv_{unique}"
    execute(source, f"CREATE TABLE {table} ({COLUMNS})")
    execute(mysql, f"CREATE TABLE {table} ({COLUMNS})")
    execute(source, f"INSERT INTO {table} VALUES (1, 'red,blue', 'a'), (2, '', 'b')")  # the snapshot's
    out = tmp_path / "rows.jsonl"
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 10\n"
        f"reader: {{type: binlog, tables: '^{stack.binlog_mysql.database}\\.{table}$'}}\n"
        "writers:\n"
        f"  - {{name: db, type: mysql, table: {table}, columns: [id, tags, note]}}\n"
        f"  - {{name: file, type: jsonl, path: {out}}}\n"
    )
    proc = start(file, tmp_path, free_port())
    try:
        want = table_rows(source, table)
        wait(lambda: table_rows(mysql, table) == want == file_rows(out), 90, "the snapshot in both targets")
        execute(
            source,
            f"INSERT INTO {table} VALUES (3, 'green,red', 'c')",
            f"UPDATE {table} SET id = 1001 WHERE id = 1",  # the key moves
            f"UPDATE {table} SET tags = 'blue' WHERE id = 2",
            f"UPDATE {table} SET id = 4, note = 'moved' WHERE id = 3",
        )
        want = table_rows(source, table)
        assert set(want) == {2, 4, 1001}
        wait(lambda: table_rows(mysql, table) == want, 60, "the MySQL target to equal the source")
        wait(lambda: file_rows(out) == want, 30, "the file to equal the source")
        assert proc.poll() is None, "the pipeline must stay up"
        assert stop(proc) == 0
    finally:
        stop(proc)
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    moved = [(item["op"], item["data"]["id"]) for item in lines if item["data"]["id"] in (1, 1001, 3, 4)]
    # A key change is the old key's delete, then the new key's row (the commit log compacts by key).
    assert moved == [
        ("insert", 1),
        ("insert", 3),
        ("delete", 1),
        ("update", 1001),
        ("delete", 3),
        ("update", 4),
    ]
