"""Binlog capture: the `binlog` pipeline reader vs a bare mysql-replication stream, same changes, same run.

Changes: `--rows` row changes (default 200,000) into a fresh table on the binlog server
(Settings().binlog_mysql, the embedded MariaDB by default): mostly inserts in multi-row
statements of 1,000 rows, then updates and deletes of ranges of them. The binlog position is
read (SHOW MASTER STATUS) before and after.
Baseline: `pymysqlreplication.BinLogStreamReader` from the position before (blocking, only
Write/Update/DeleteRowsEvent, only that table), counting decoded rows until it has them all.
hubstream: `BinlogSource` (reader type `binlog`) resumed at the same position (a SYNC reader state
for the table's namespace, so no snapshot), counting the entries it yields until it has them all.
The machine's speed drifts, so the bench runs `--rounds` alternating pairs and compares medians.
Usage: .venv/bin/python bench/binlog_capture.py [--rows 200000] [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

import pymysql

from app.pipeline.binlog import BinlogPosition, BinlogSource
from app.pipeline.model import Mode
from app.pipeline.offsets import ReaderState
from app.settings import MysqlTarget, get_settings

STATEMENT_ROWS = 1000
DDL = (
    "CREATE TABLE `{}` (id BIGINT PRIMARY KEY, recipient VARCHAR(64), origin VARCHAR(32), "
    "message_type VARCHAR(64), weight INT, bundleable BOOL, amount DECIMAL(12, 2), created DATETIME)"
)


def connect(target: MysqlTarget) -> Any:
    return pymysql.connect(**target.connect_args(autocommit=True))


def position(conn: Any) -> BinlogPosition:
    with conn.cursor() as cursor:
        cursor.execute("SHOW MASTER STATUS")
        file, pos = cursor.fetchone()[:2]
    return BinlogPosition(str(file), int(pos))


def generate(conn: Any, table: str, count: int) -> None:
    """`count` row changes: 90 % inserts, then 7 % updates and 3 % deletes of inserted rows."""
    updates, deletes = count * 7 // 100, count * 3 // 100
    inserts = count - updates - deletes
    with conn.cursor() as cursor:
        for first in range(0, inserts, STATEMENT_ROWS):
            ids = range(first, min(first + STATEMENT_ROWS, inserts))
            values = ", ".join(
                f"({i}, 'recipient-{i % 500:04d}', 'TimeSeries', 'MeteredData', {i % 100}, {i % 3 == 0},"
                f" {i % 10000}.25, '2026-11-22 10:{i % 60:02d}:00')"
                for i in ids
            )
            cursor.execute(f"INSERT INTO `{table}` VALUES {values}")
        for first in range(0, updates, STATEMENT_ROWS):  # every updated row changes (weight + 1000)
            last = min(first + STATEMENT_ROWS, updates) - 1
            cursor.execute(f"UPDATE `{table}` SET weight = weight + 1000 WHERE id BETWEEN {first} AND {last}")
        base = inserts - deletes  # delete the last inserted rows, none of them updated
        for first in range(base, inserts, STATEMENT_ROWS):
            last = min(first + STATEMENT_ROWS, inserts) - 1
            cursor.execute(f"DELETE FROM `{table}` WHERE id BETWEEN {first} AND {last}")


def run_bare(target: MysqlTarget, table: str, start: BinlogPosition, count: int, server_id: int) -> float:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    began = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings={
            "host": target.host,
            "port": target.port,
            "user": target.user,
            "passwd": target.password,
        },
        server_id=server_id,
        blocking=True,
        resume_stream=True,
        log_file=start.file,
        log_pos=start.group_start,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[target.database],
        only_tables=[table],
        enable_logging=False,
    )
    rows = 0
    try:
        while rows < count:
            event = stream.fetchone()
            rows += len(event.rows)
    finally:
        stream.close()
    assert rows == count, f"bare stream saw {rows} rows, expected {count}"
    return count / (time.perf_counter() - began)


async def run_hubstream(
    target: MysqlTarget, table: str, start: BinlogPosition, count: int, server_id: int
) -> float:
    namespace = f"{target.database}.{table}"
    options = {"tables": f"^{target.database}\\.{table}$", "server_id": server_id}
    resume = {namespace: ReaderState(Mode.SYNC, {"binlog": start.to_json()}, 0)}
    began = time.perf_counter()
    source = BinlogSource(target, options, batch_size=1000, wait_s=0.2)
    entries = 0
    try:
        async for batch in source.read(resume):
            entries += len(batch)
            if entries >= count:
                break
    finally:
        await source.close()
    assert entries == count, f"BinlogSource yielded {entries} entries, expected {count}"
    return count / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5, choices=range(1, 51), metavar="1..50")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the hubstream runs")
    args = parser.parse_args()
    target = get_settings().binlog_mysql
    table = f"bench_bl_{uuid.uuid4().hex[:12]}"
    conn = connect(target)
    with conn.cursor() as cursor:
        cursor.execute(DDL.format(table))
    start = position(conn)
    generated = time.perf_counter()
    generate(conn, table, args.rows)
    generated = time.perf_counter() - generated
    end = position(conn)
    print(f"{args.rows:,} row changes into {table} in {generated:.1f} s, binlog {start} .. {end}")

    profiler: Any = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler()
    pairs: list[tuple[float, float]] = []
    server_id = 3_000_000 + int(uuid.uuid4().int % 1_000_000) * 10
    try:
        for index in range(args.rounds):
            bare = run_bare(target, table, start, args.rows, server_id + 2 * index)
            if profiler is not None:
                profiler.start()
            ours = asyncio.run(run_hubstream(target, table, start, args.rows, server_id + 2 * index + 1))
            if profiler is not None:
                profiler.stop()
            pairs.append((bare, ours))
            print(
                f"round {index + 1}: bare {bare:,.0f} rows/s, BinlogSource {ours:,.0f} rows/s,"
                f" ratio {ours / bare:.2f}"
            )
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS `{table}`")
        conn.close()
    if profiler is not None:
        profiler.print(show_all=False)

    bare_median = statistics.median(b for b, _ in pairs)
    ours_median = statistics.median(o for _, o in pairs)
    ratio = ours_median / bare_median
    print(f"rows: {args.rows}, rounds: {args.rounds}")
    print(f"baseline   bare BinLogStreamReader (median): {bare_median:,.0f} rows/s")
    print(f"hubstream  BinlogSource (median):            {ours_median:,.0f} rows/s")
    print(f"ratio of medians: {ratio:.2f} (target >= 0.8)")
    print(
        json.dumps(
            {
                "bench": "binlog_capture",
                "rows": args.rows,
                "rounds": args.rounds,
                "baseline_rows_per_s": round(bare_median),
                "binlog_source_rows_per_s": round(ours_median),
                "ratio": round(ratio, 3),
                "round_ratios": [round(o / b, 3) for b, o in pairs],
            }
        )
    )


if __name__ == "__main__":
    main()
