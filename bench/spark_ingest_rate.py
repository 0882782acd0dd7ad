"""Spark ingest vs a single-process confluent-kafka producer of the same events, same run.

    .venv/bin/python bench/spark_ingest_rate.py [--rows 200000] [--recipients 1000] [--master local[2]]

Both sides produce the same bytes (DataAvailable JSON via orjson) with the same keys to the
same partitions of fresh composite topics with the same partition count; the bench checks
that the per-partition message counts are equal. Figures:

- spark (headline): the ingest job (read Parquet, validate with DataAvailable.parse, ids, route,
  produce, flush, rejects file) in a JVM that already ran it once: the rate a long run settles at.
- spark_first_job: the same job as the first job of a fresh JVM (cold JIT), and
  spark_with_startup: that plus JVM/session/Python-worker start-up, which is what a one-off CLI
  run of this size pays.
- baseline: one Python process doing the same work (pyarrow read, same validation, same
  serialization, same router) with one confluent-kafka producer.
- raw_producer: one producer sending values serialized and routed beforehand (produce only):
  the ceiling of one Python process, for reference.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from confluent_kafka import Producer

from app.composite.producer import producer_config
from app.composite.routing import group_hash, route
from app.composite.store import MetadataStore
from app.errors import HubstreamError
from app.settings import get_settings
from spark_ingest.executor import event_json
from spark_ingest.job import IngestOptions, run_ingest
from spark_ingest.reader import build_session, warm_up
from spark_ingest.sample import SampleSpec, generate
from spark_ingest.schema import RowSource, validate_row

PARTITIONS = 12


def _events(path: Path) -> list[tuple[str, int, bytes]]:
    """(key, row, value) of each valid row, exactly as the job serializes them."""
    out = []
    identity = path.name
    for row_index, row in enumerate(pq.read_table(path).to_pylist()):
        try:
            event = validate_row(row, RowSource(identity, row_index))
        except HubstreamError:
            continue
        out.append((event.recipient, row_index, orjson.dumps(event_json(event))))
    return out


def baseline(path: Path, topic: str, partitions: int, k: int) -> tuple[int, float]:
    """One process: read, validate, serialize, route and produce every row; flush."""
    settings = get_settings()
    producer = Producer(producer_config(settings, **{"linger.ms": 20, "batch.size": 1_000_000}))
    failures: list[str] = []
    started = time.perf_counter()
    sent = 0
    for key, _row, value in _events(path):
        partition = route(group_hash(key), partitions, k)
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key.encode(),
                    partition=partition,
                    on_delivery=lambda err, _m: failures.append(str(err)) if err else None,
                )
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert not remaining and not failures, (remaining, failures[:3])
    return sent, elapsed


def raw_producer(prepared: list[tuple[bytes, int, bytes]], topic: str) -> float:
    producer = Producer(producer_config(get_settings(), **{"linger.ms": 20, "batch.size": 1_000_000}))
    started = time.perf_counter()
    for i, (key, partition, value) in enumerate(prepared):
        while True:
            try:
                producer.produce(topic, value, key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    settings = get_settings()
    store = MetadataStore.of(settings)
    suffix = uuid.uuid4().hex[:8]
    names = {side: f"bench-ingest-{side}-{suffix}" for side in ("spark_cold", "spark", "baseline", "raw")}
    topics = {side: store.create(name, PARTITIONS).current for side, name in names.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.parquet"
        generate(SampleSpec(args.rows, args.recipients), path, "parquet")

        t0 = time.perf_counter()
        spark = build_session(args.master)
        warm_up(spark)
        startup_s = time.perf_counter() - t0

        def spark_run(side: str) -> tuple[int, float]:
            summary = run_ingest(
                IngestOptions(
                    str(path), names[side], master=args.master, rejects=Path(tmp) / f"{side}.jsonl"
                ),
                settings=settings,
                spark=spark,
                report=lambda line: print(f"  {line}", file=sys.stderr),
            )
            return summary.produced, summary.duration_s

        produced_cold, cold_s = spark_run("spark_cold")
        storage = topics["baseline"]
        sent, baseline_s = baseline(path, storage.name, storage.partitions, storage.k)
        produced_warm, warm_s = spark_run("spark")
        spark.stop()

        prepared = [(k.encode(), route(group_hash(k), PARTITIONS, 1), v) for k, _r, v in _events(path)]
        raw_s = raw_producer(prepared, topics["raw"].name)

    ends = {
        side: store.broker.end_offsets([(t.name, p) for p in range(t.partitions)])
        for side, t in topics.items()
    }
    assert ends["spark_cold"] == ends["spark"] == ends["baseline"] == ends["raw"], ends
    assert produced_cold == produced_warm == sent == sum(ends["spark"])
    for name in names.values():
        store.delete(name)
    store.close()

    figures = {
        "events": sent,
        "master": args.master,
        "spark_startup_s": round(startup_s, 2),
        "spark_first_job_s": round(cold_s, 2),
        "spark_job_s": round(warm_s, 2),
        "spark_events_per_s": round(sent / warm_s),
        "spark_first_job_events_per_s": round(sent / cold_s),
        "spark_with_startup_events_per_s": round(sent / (cold_s + startup_s)),
        "baseline_events_per_s": round(sent / baseline_s),
        "raw_producer_events_per_s": round(sent / raw_s),
    }
    base = figures["baseline_events_per_s"]
    figures["ratio"] = round(figures["spark_events_per_s"] / base, 2)
    figures["ratio_first_job"] = round(figures["spark_first_job_events_per_s"] / base, 2)
    figures["ratio_with_startup"] = round(figures["spark_with_startup_events_per_s"] / base, 2)
    figures["ratio_vs_raw_producer"] = round(
        figures["spark_events_per_s"] / figures["raw_producer_events_per_s"], 2
    )
    rows = [
        (
            f"spark ingest ({args.master}), warm JVM [headline]",
            figures["spark_events_per_s"],
            f"{warm_s:.1f} s",
        ),
        (
            "spark ingest, first job in a fresh JVM",
            figures["spark_first_job_events_per_s"],
            f"{cold_s:.1f} s",
        ),
        (
            "spark first job incl. JVM/session start",
            figures["spark_with_startup_events_per_s"],
            f"+{startup_s:.1f} s",
        ),
        ("baseline, one process, same work", base, f"{baseline_s:.1f} s"),
        ("raw producer, pre-serialized values", figures["raw_producer_events_per_s"], f"{raw_s:.1f} s"),
    ]
    for label, rate, took in rows:
        print(f"{label:<48} {rate:>8} events/s ({took})")
    print(
        f"ratio spark/baseline: {figures['ratio']} (first job {figures['ratio_first_job']}, with start-up "
        f"{figures['ratio_with_startup']}; warm spark vs raw producer {figures['ratio_vs_raw_producer']})"
    )
    print(orjson.dumps(figures).decode())


if __name__ == "__main__":
    main()
