"""Binlog capture replaying rows of tables that were dropped or renamed since: a pipeline stopped,
rows written to captured tables, one table dropped and one renamed, the pipeline started again.
The rows are replayed from the binlog with the primary key the binlog itself records for them, and
the renamed table, a new name that matches, is copied and streamed. The old code asked the server
for the key of a table that no longer exists, and the reader stopped there: no later row of any
table reached the target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from app.settings import Settings

from .support import free_port, start, stop, wait

pytestmark = pytest.mark.integration


def execute(conn: pymysql.connections.Connection[Any], *statements: str) -> None:
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def file_rows(path: Path) -> dict[tuple[str, int], str]:
    """(table, id) -> note, the file's lines applied in order."""
    rows: dict[tuple[str, int], str] = {}
    for line in path.read_bytes().splitlines() if path.exists() else ():
        item = orjson.loads(line)
        key = (item["namespace"].partition(".")[2], int(item["data"]["id"]))
        if item["op"] == "delete":
            rows.pop(key, None)
        else:
            rows[key] = str(item["data"]["note"])
    return rows


def test_rows_of_dropped_and_renamed_tables_are_replayed_and_capture_goes_on(
    stack: Settings, source: pymysql.connections.Connection[Any], unique: str, tmp_path: Path
) -> None:
    prefix = f"cdcd_{unique}"
    gone, moved, kept = f"{prefix}_gone", f"{prefix}_moved", f"{prefix}_kept"
    for table in (gone, moved, kept):
        execute(source, f"CREATE TABLE {table} (id INT PRIMARY KEY, note VARCHAR(32))")
        execute(source, f"INSERT INTO {table} VALUES (1, 'snapshot')")
    out = tmp_path / "rows.jsonl"
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: cdcd-{unique}\nbatch_size: 10\n"
        f"reader: {{type: binlog, tables: '^{stack.binlog_mysql.database}\\.{prefix}_'}}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {out}}}\n"
    )
    snapshot = {(table, 1): "snapshot" for table in (gone, moved, kept)}
    proc = start(file, tmp_path, free_port())
    try:
        wait(lambda: file_rows(out) == snapshot, 90, "the snapshot in the file")
        assert stop(proc) == 0
        execute(
            source,
            f"INSERT INTO {gone} VALUES (2, 'before the drop')",
            f"UPDATE {gone} SET note = 'changed' WHERE id = 1",
            f"INSERT INTO {moved} VALUES (2, 'before the rename')",
            f"DROP TABLE {gone}",
            f"RENAME TABLE {moved} TO {moved}_new",
            f"INSERT INTO {moved}_new VALUES (3, 'after the rename')",
            f"INSERT INTO {kept} VALUES (2, 'last')",
        )
        want = {
            **snapshot,
            (gone, 1): "changed",
            (gone, 2): "before the drop",
            (moved, 2): "before the rename",
            # A table that starts to match is copied whole first, then streamed.
            (f"{moved}_new", 1): "snapshot",
            (f"{moved}_new", 2): "before the rename",
            (f"{moved}_new", 3): "after the rename",
            (kept, 2): "last",
        }
        proc = start(file, tmp_path, free_port())
        wait(lambda: file_rows(out) == want, 90, "every row written before and after the DDL in the file")
        assert proc.poll() is None, "the pipeline must stay up"
        assert stop(proc) == 0
    finally:
        stop(proc)
