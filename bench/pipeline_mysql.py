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
Each side takes a few seconds at 200,000 rows, so the machine's noise is large: the bench runs
`--rounds` alternating baseline/writer pairs (each into a fresh table) and compares the medians.
Usage: .venv/bin/python bench/pipeline_mysql.py [--rows 50000] [--batch-size 1000] [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Iterator
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
    return pymysql.connect(**settings.mysql.connect_args(autocommit=False))


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


async def run_rounds(
    settings: Settings, composite: str, rows: list[dict[str, Any]], args: argparse.Namespace, suffix: str
) -> tuple[float, list[tuple[float, float]]]:
    """End to end once (reader and writer together, empty commit log), then `rounds` alternating
    pairs: the baseline into a fresh table, and a fresh writer draining the commit log the first
    run filled (from offset -1) into another fresh table. Returns end to end and (baseline, writer)
    per round; every table must end up holding every row."""
    control_topic = f"bench-pl-{suffix}.control"
    commit_log = KafkaCommitLog(settings.bootstrap, f"bench-pl-{suffix}.log")
    commit_log.ensure_topic()
    KafkaAdmin(settings.bootstrap).create([TopicSpec(control_topic, 1)])
    source = CompositeSource(settings, {"topic": composite}, args.batch_size, 0.2)
    count = len(rows)
    pairs: list[tuple[float, float]] = []
    try:
        with fresh_table(settings, count) as table:
            end_to_end = await run_pipeline(
                settings, commit_log, control_topic, source, table, count, args.batch_size
            )
        for _ in range(args.rounds):
            with fresh_table(settings, count) as table:
                baseline = run_baseline(settings, table, rows, args.batch_size)
            with fresh_table(settings, count) as table:
                writer = await run_pipeline(
                    settings, commit_log, control_topic, None, table, count, args.batch_size
                )
            pairs.append((baseline, writer))
    finally:
        await commit_log.close()
    return end_to_end, pairs


@contextlib.contextmanager
def fresh_table(settings: Settings, expected_rows: int) -> Iterator[str]:
    """A new empty table; afterwards it must hold `expected_rows` rows, and it is dropped."""
    table = f"bench_pl_{uuid.uuid4().hex[:12]}"
    conn = connect(settings)
    try:
        with conn.cursor() as cursor:
            cursor.execute(DDL.format(table))
        conn.commit()
        yield table
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM `{table}`")
            found = int(cursor.fetchone()[0])
        assert found == expected_rows, f"{table} holds {found} rows, expected {expected_rows}"
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS `{table}`")
        conn.commit()
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5, choices=range(1, 51), metavar="1..50")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the pipeline runs")
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

    coroutine = run_rounds(settings, composite.name, rows, args, suffix)
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
        with profiler:
            end_to_end, pairs = asyncio.run(coroutine)
        profiler.print(show_all=False)
    else:
        end_to_end, pairs = asyncio.run(coroutine)

    baseline = statistics.median(b for b, _ in pairs)
    writer = statistics.median(w for _, w in pairs)
    ratio = writer / baseline
    print(f"rows: {args.rows}, batch size: {args.batch_size}, rounds: {args.rounds}")
    for index, (b, w) in enumerate(pairs, 1):
        print(f"round {index}: baseline {b:,.0f} rows/s, writer {w:,.0f} rows/s, ratio {w / b:.2f}")
    print(f"baseline   pymysql executemany INSERT loop (median):      {baseline:,.0f} rows/s")
    print(f"hubstream  MySQL writer draining the commit log (median): {writer:,.0f} rows/s")
    print(f"hubstream  end to end (composite reader + writer, start-up): {end_to_end:,.0f} rows/s")
    print(
        f"ratio writer/baseline (medians): {ratio:.2f} (target >= 0.8); "
        f"end to end/baseline: {end_to_end / baseline:.2f}"
    )
    print(
        json.dumps(
            {
                "bench": "pipeline_mysql",
                "rows": args.rows,
                "batch_size": args.batch_size,
                "rounds": args.rounds,
                "baseline_rows_per_s": round(baseline),
                "writer_rows_per_s": round(writer),
                "end_to_end_rows_per_s": round(end_to_end),
                "ratio": round(ratio, 3),
                "round_ratios": [round(w / b, 3) for b, w in pairs],
                "end_to_end_ratio": round(end_to_end / baseline, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
