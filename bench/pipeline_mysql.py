"""Composite topic -> MySQL pipeline writer vs a plain pymysql executemany loop, same rows, same run.

hubstream: the pipeline engine with its real adapters, in this process: the composite-topic reader,
the Kafka commit log (append, then a cursor per writer), the MySQL bulk writer (multi-row
INSERT ... ON DUPLICATE KEY UPDATE, one transaction per batch) and the offset flush to the control
topic every second. Timed from the engine's start until the writer confirmed the last row
(Faust app start-up is not included; like the pipeline process, the bench calls
`freeze_startup_heap` just before the engine starts). The rows are produced to the composite topic
beforehand.
Baseline: the same rows as tuples, `cursor.executemany("INSERT INTO t (...) VALUES (...)", chunk)`
and a commit per chunk of the same batch size, into an identical table.
Usage: .venv/bin/python bench/pipeline_mysql.py [--rows 50000] [--batch-size 1000] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

import pymysql

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.admin import KafkaAdmin, TopicSpec, true_end_offsets
from app.pipeline.chain import Branch
from app.pipeline.engine import PipelineRuntime
from app.pipeline.kafka_log import KafkaCommitLog
from app.pipeline.readers import CompositeSource
from app.pipeline.service import freeze_startup_heap
from app.pipeline.state import ControlChannel, KafkaStateStore
from app.pipeline.writers import MysqlSink
from app.settings import Settings, get_settings

COLUMNS = ["id", "recipient", "origin", "message_type", "weight", "bundleable", "batch_item_id"]
DDL = (
    "CREATE TABLE `{}` (id VARCHAR(64) PRIMARY KEY, recipient VARCHAR(64), origin VARCHAR(32), "
    "message_type VARCHAR(64), weight INT, bundleable BOOL, batch_item_id VARCHAR(64))"
)


def make_rows(count: int, suffix: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{suffix}-{i:08d}",
            "recipient": f"recipient-{i % 500:04d}",
            "origin": "TimeSeries",
            "message_type": "MeteredData",
            "weight": i % 100,
            "bundleable": i % 3 == 0,
            "batch_item_id": f"batch-{i // 1000}-{i % 1000}",
        }
        for i in range(count)
    ]


def connect(settings: Settings) -> Any:
    target = settings.mysql
    return pymysql.connect(
        host=target.host,
        port=target.port,
        user=target.user,
        password=target.password,
        database=target.database,
        autocommit=False,
        charset="utf8mb4",
    )


def run_baseline(settings: Settings, table: str, rows: list[dict[str, Any]], batch_size: int) -> float:
    tuples = [tuple(row[c] for c in COLUMNS) for row in rows]  # not timed: the rows exist in memory
    sql = f"INSERT INTO `{table}` ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
    conn = connect(settings)
    try:
        start = time.perf_counter()
        with conn.cursor() as cursor:
            for first in range(0, len(tuples), batch_size):
                cursor.executemany(sql, tuples[first : first + batch_size])
                conn.commit()
        return len(tuples) / (time.perf_counter() - start)
    finally:
        conn.close()


async def run_pipeline(
    settings: Settings,
    commit_log: KafkaCommitLog,
    control_topic: str,
    source: CompositeSource | None,
    table: str,
    count: int,
    batch_size: int,
) -> float:
    """Rows/s from the engine's start until the writer confirmed commit-log offset count - 1."""
    sink = MysqlSink(settings, {"table": table, "columns": COLUMNS})
    runtime = PipelineRuntime(
        name=f"bench-{table}",
        log_=commit_log,
        store=KafkaStateStore(ControlChannel(settings.bootstrap, control_topic)),
        source=source,
        writers={"db": (Branch("db"), sink)},
        writer_states={},
        reader_states={},
        batch_size=batch_size,
        batch_wait_s=0.2,
        flush_interval_s=settings.offset_flush_interval_s,
    )
    freeze_startup_heap()  # as PipelineHost.run does
    start = time.perf_counter()
    await runtime.start()
    slot = runtime.slots["db"]
    while slot.state.offset < count - 1:
        if not slot.running:
            raise RuntimeError(f"writer stopped: {runtime.flags.events[-1:]}")
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - start
    await runtime.stop(30)
    return count / elapsed


async def run_both(
    settings: Settings, composite: str, tables: tuple[str, str], count: int, batch_size: int, suffix: str
) -> tuple[float, float]:
    """End to end (reader and writer together, empty commit log), then the writer alone draining the
    commit log the first run filled (a fresh writer from offset -1 into a second identical table)."""
    control_topic = f"bench-pl-{suffix}.control"
    commit_log = KafkaCommitLog(settings.bootstrap, f"bench-pl-{suffix}.log")
    commit_log.ensure_topic()
    KafkaAdmin(settings.bootstrap).create([TopicSpec(control_topic, 1)])
    source = CompositeSource(settings, {"topic": composite}, batch_size, 0.2)
    try:
        end_to_end = await run_pipeline(
            settings, commit_log, control_topic, source, tables[0], count, batch_size
        )
        writer = await run_pipeline(settings, commit_log, control_topic, None, tables[1], count, batch_size)
    finally:
        await commit_log.close()
    return end_to_end, writer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--profile", action="store_true", help="pyinstrument the pipeline run")
    args = parser.parse_args()
    settings = get_settings()
    suffix = uuid.uuid4().hex[:8]
    rows = make_rows(args.rows, suffix)

    store = MetadataStore(settings.bootstrap, settings.metadata_topic)
    composite = store.create(f"bench-pl-src-{suffix}", args.partitions)
    with CompositeProducer(settings, composite.name, store=store) as producer:
        for row in rows:
            producer.produce(str(row["recipient"]), row)
    store.close()
    storage = composite.storage_topics[0]
    ends = true_end_offsets(settings.bootstrap, [(storage.name, p) for p in range(storage.partitions)])
    assert sum(ends) == args.rows, f"composite topic holds {sum(ends)} of {args.rows} rows"

    tables = (f"bench_pl_{suffix}", f"bench_plw_{suffix}", f"bench_base_{suffix}")
    conn = connect(settings)
    with conn.cursor() as cursor:
        for table in tables:
            cursor.execute(DDL.format(table))
    conn.commit()

    baseline = run_baseline(settings, tables[2], rows, args.batch_size)
    coroutine = run_both(settings, composite.name, tables[:2], args.rows, args.batch_size, suffix)
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
        with profiler:
            end_to_end, writer = asyncio.run(coroutine)
        profiler.print(show_all=False)
    else:
        end_to_end, writer = asyncio.run(coroutine)

    with conn.cursor() as cursor:
        counts = []
        for table in tables:
            cursor.execute(f"SELECT COUNT(*) FROM `{table}`")
            counts.append(int(cursor.fetchone()[0]))
        for table in tables:
            cursor.execute(f"DROP TABLE `{table}`")
    conn.commit()
    conn.close()
    assert counts == [args.rows] * 3, f"row counts {counts}, expected {args.rows} each"

    ratio = writer / baseline
    print(f"rows: {args.rows}, batch size: {args.batch_size}")
    print(f"baseline   pymysql executemany INSERT loop:               {baseline:,.0f} rows/s")
    print(f"hubstream  MySQL writer draining the commit log:          {writer:,.0f} rows/s")
    print(f"hubstream  end to end (composite reader + writer, start-up): {end_to_end:,.0f} rows/s")
    print(
        f"ratio writer/baseline: {ratio:.2f} (target >= 0.8); "
        f"end to end/baseline: {end_to_end / baseline:.2f}"
    )
    print(
        json.dumps(
            {
                "bench": "pipeline_mysql",
                "rows": args.rows,
                "batch_size": args.batch_size,
                "baseline_rows_per_s": round(baseline),
                "writer_rows_per_s": round(writer),
                "end_to_end_rows_per_s": round(end_to_end),
                "ratio": round(ratio, 3),
                "end_to_end_ratio": round(end_to_end / baseline, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
