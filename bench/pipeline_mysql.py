"""Composite topic -> MySQL pipeline writer vs a plain pymysql executemany loop, same rows, same run.

hubstream: the pipeline engine with its real adapters, in this process: the composite-topic reader,
the Kafka commit log (append, then a cursor per writer), the MySQL bulk writer (multi-row
INSERT ... ON DUPLICATE KEY UPDATE, one transaction per batch) and the offset flush to the control
topic every second. Timed from the engine's start until the writer confirmed the last row
(Faust app start-up is not included; like the pipeline process, the bench calls
`tune_garbage_collector` just before the engine starts). The rows are produced to the composite topic
beforehand.
Baseline: the same rows as tuples, `cursor.executemany("INSERT INTO t (...) VALUES (...)", chunk)`
and a commit per chunk of the same batch size, into an identical table.
End-to-end baseline (raw Kafka -> MySQL): a confluent-kafka consumer reads the composite topic's
storage partitions from the beginning (`consume` of up to a batch), decodes each JSON value into a
tuple, and `executemany` + commit per batch of the same size, until every row is in.
Each side takes a few seconds at 200,000 rows, so the machine's noise is large: the bench runs
`--rounds` alternating rounds (baseline, writer draining the first run's commit log, raw Kafka ->
MySQL, end to end into a fresh commit log; each into a fresh table) and compares the medians.
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
from dataclasses import dataclass
from typing import Any

import orjson
import pymysql
from confluent_kafka import Consumer, TopicPartition

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import broker_for
from app.pipeline.chain import Branch
from app.pipeline.engine import PipelineRuntime
from app.pipeline.kafka_log import KafkaCommitLog
from app.pipeline.readers import CompositeSource
from app.pipeline.service import tune_garbage_collector
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


def run_raw_kafka(
    settings: Settings, storage: list[tuple[str, int]], table: str, count: int, batch_size: int
) -> float:
    """Rows/s of a plain consume -> executemany -> commit loop over the source partitions."""
    sql = f"INSERT INTO `{table}` ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
    conn = connect(settings)
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, partition, 0) for topic, partition in storage])
        written = 0
        with conn.cursor() as cursor:
            while written < count:
                records = consumer.consume(batch_size, 0.2)
                rows = []
                for record in records:
                    if record.error():
                        continue
                    value = orjson.loads(record.value())
                    rows.append(tuple(value[c] for c in COLUMNS))
                if rows:
                    cursor.executemany(sql, rows)
                    conn.commit()
                    written += len(rows)
        return written / (time.perf_counter() - start)
    finally:
        consumer.close()
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
    tune_garbage_collector()  # as PipelineHost.run does
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


@dataclass
class Round:
    baseline: float  # executemany loop, rows in memory
    writer: float  # a fresh writer draining the first end-to-end run's commit log
    raw_kafka: float  # consume the source topic -> executemany loop
    end_to_end: float  # composite reader -> commit log -> writer, fresh commit log


async def run_end_to_end(
    settings: Settings, composite: str, args: argparse.Namespace, suffix: str, count: int
) -> tuple[float, KafkaCommitLog]:
    """The composite reader and the writer together, from an empty commit log (returned, still open)."""
    control_topic = f"bench-pl-{suffix}.control"
    commit_log = KafkaCommitLog(broker_for(settings), f"bench-pl-{suffix}.log")
    commit_log.ensure_topic(settings.kafka_replication_factor)
    KafkaAdmin(settings.bootstrap, settings.kafka_replication_factor).create([TopicSpec(control_topic, 1)])
    source = CompositeSource(settings, {"topic": composite}, args.batch_size, 0.2)
    with fresh_table(settings, count) as table:
        rate = await run_pipeline(settings, commit_log, control_topic, source, table, count, args.batch_size)
    return rate, commit_log


async def run_rounds(
    settings: Settings,
    composite: str,
    storage: list[tuple[str, int]],
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    suffix: str,
) -> list[Round]:
    """`rounds` alternating rounds; every table must end up holding every row. The writer drains
    the commit log of the first round's end-to-end run (from offset -1); each end-to-end run fills
    a fresh commit log."""
    count = len(rows)
    first_e2e, first_log = await run_end_to_end(settings, composite, args, f"{suffix}-0", count)
    rounds: list[Round] = []
    try:
        for index in range(args.rounds):
            with fresh_table(settings, count) as table:
                baseline = run_baseline(settings, table, rows, args.batch_size)
            with fresh_table(settings, count) as table:
                writer = await run_pipeline(
                    settings, first_log, f"bench-pl-{suffix}-0.control", None, table, count, args.batch_size
                )
            with fresh_table(settings, count) as table:
                raw = run_raw_kafka(settings, storage, table, count, args.batch_size)
            if index == 0:
                end_to_end = first_e2e
            else:
                end_to_end, commit_log = await run_end_to_end(
                    settings, composite, args, f"{suffix}-{index}", count
                )
                await commit_log.close()
            rounds.append(Round(baseline, writer, raw, end_to_end))
    finally:
        await first_log.close()
    return rounds


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

    store = MetadataStore.of(settings)
    composite = store.create(f"bench-pl-src-{suffix}", args.partitions)
    with CompositeProducer(settings, composite.name, store=store) as producer:
        for row in rows:
            producer.produce(str(row["recipient"]), row)
    store.close()
    storage = composite.storage_topics[0]
    partitions = [(storage.name, p) for p in range(storage.partitions)]
    ends = broker_for(settings).end_offsets(partitions)
    assert sum(ends) == args.rows, f"composite topic holds {sum(ends)} of {args.rows} rows"

    coroutine = run_rounds(settings, composite.name, partitions, rows, args, suffix)
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
        with profiler:
            rounds = asyncio.run(coroutine)
        profiler.print(show_all=False)
    else:
        rounds = asyncio.run(coroutine)

    baseline = statistics.median(r.baseline for r in rounds)
    writer = statistics.median(r.writer for r in rounds)
    raw = statistics.median(r.raw_kafka for r in rounds)
    end_to_end = statistics.median(r.end_to_end for r in rounds)
    ratio = writer / baseline
    print(f"rows: {args.rows}, batch size: {args.batch_size}, rounds: {args.rounds}")
    for index, r in enumerate(rounds, 1):
        print(
            f"round {index}: baseline {r.baseline:,.0f} rows/s, writer {r.writer:,.0f} rows/s, "
            f"ratio {r.writer / r.baseline:.2f}; raw Kafka->MySQL {r.raw_kafka:,.0f} rows/s, "
            f"end to end {r.end_to_end:,.0f} rows/s, ratio {r.end_to_end / r.raw_kafka:.2f}"
        )
    print(f"baseline   pymysql executemany INSERT loop (median):      {baseline:,.0f} rows/s")
    print(f"hubstream  MySQL writer draining the commit log (median): {writer:,.0f} rows/s")
    print(f"baseline   raw Kafka -> MySQL loop (median):              {raw:,.0f} rows/s")
    print(f"hubstream  end to end (composite reader + writer, start-up, median): {end_to_end:,.0f} rows/s")
    print(
        f"ratio writer/baseline (medians): {ratio:.2f} (target >= 0.8); "
        f"end to end/baseline: {end_to_end / baseline:.2f}; "
        f"end to end/raw Kafka -> MySQL: {end_to_end / raw:.2f} (target >= 0.8)"
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
                "raw_kafka_rows_per_s": round(raw),
                "ratio": round(ratio, 3),
                "round_ratios": [round(r.writer / r.baseline, 3) for r in rounds],
                "end_to_end_ratio": round(end_to_end / baseline, 3),
                "end_to_end_raw_ratio": round(end_to_end / raw, 3),
                "round_end_to_end_raw_ratios": [round(r.end_to_end / r.raw_kafka, 3) for r in rounds],
            }
        )
    )


if __name__ == "__main__":
    main()
