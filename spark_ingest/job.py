"""The ingest job's driver: read files, validate, route and produce DataAvailable events.

Run it with `hubstream spark ingest PATH --topic data-available …` or
`spark-submit spark_ingest/job.py PATH --topic data-available …` (same options).
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from app.composite.producer import producer_config
from app.composite.store import MetadataStore
from app.errors import HubstreamError
from app.settings import Settings, get_settings
from spark_ingest.batch import BatchTracker, HttpBatchTracker, open_assignment, wait_complete
from spark_ingest.errors import IngestFailed
from spark_ingest.executor import COUNT_SCHEMA, RESULT_SCHEMA, count_valid_batches, produce_batches
from spark_ingest.plan import IngestPlan, count_by_split, split_offsets
from spark_ingest.progress import IngestProgress, TextProgress
from spark_ingest.reader import build_session, detect_format, read_input, warm_up

__all__ = ["IngestOptions", "IngestSummary", "main", "run_ingest"]

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class IngestOptions:
    path: str
    topic: str
    input_format: str | None = None
    master: str | None = "local[*]"  # None: the master spark-submit was given
    rejects: Path | None = None
    batch: bool = False
    wait: bool = False
    batch_url: str | None = None
    batch_user_key: str | None = None
    wait_timeout_s: float = 600.0
    progress_interval_s: float = 10.0
    max_task_failures: int = 4
    crash_at: str = ""  # crash points armed in each produce task's first attempt (tests)


@dataclass(frozen=True, slots=True)
class IngestSummary:
    input: str
    format: str
    topic: str
    storage_topic: str
    rows_read: int
    rejected: int
    produced: int
    duration_s: float
    rate_per_s: float
    rejects_file: str
    startup_s: float = 0.0  # JVM, session and Python workers, when the job started its own session
    failed_tasks: int = 0  # task attempts of the produce job that failed and were run again
    batch_id: str | None = None
    batch_complete: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _default_rejects(settings: Settings) -> Path:
    return settings.home / "spark_ingest" / f"rejects-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"


TASK_POLL_S = 0.5


def _watch_tasks(spark: SparkSession, progress: IngestProgress, label: str) -> Callable[[], None]:
    """Tell `progress` the running stages' tasks every TASK_POLL_S until the returned stop is called."""
    stop = threading.Event()

    def loop() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not stop.wait(TASK_POLL_S):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done, total = done + info.numCompletedTasks, total + info.numTasks
            if total:
                progress.tasks(label, done, total)

    thread = threading.Thread(target=loop, name="ingest-progress", daemon=True)
    thread.start()

    def finish() -> None:
        stop.set()
        thread.join(timeout=TASK_POLL_S + 1)

    return finish


@dataclass(frozen=True, slots=True)
class _Collected:
    rows: list[Any]
    failed_tasks: int  # attempts that failed and were run again


def _collect(frame: DataFrame, spark: SparkSession, progress: IngestProgress, label: str) -> _Collected:
    group = f"hubstream-ingest-{uuid.uuid4().hex[:12]}"
    context = spark.sparkContext
    context.setJobGroup(group, label)
    finish = _watch_tasks(spark, progress, label)
    try:
        rows = frame.collect()
        return _Collected(rows, _failed_attempts(spark, group))
    except HubstreamError:
        raise
    except Exception as exc:  # Py4JJavaError / PythonException after Spark gave up retrying
        failed = _failed_attempts(spark, group)
        raise IngestFailed(
            f"{label} failed ({failed} failed task attempts): {_spark_failure(str(exc))}"
        ) from exc
    finally:
        finish()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def _failed_attempts(spark: SparkSession, group: str) -> int:
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else []:
            stage = tracker.getStageInfo(stage_id)
            failed += stage.numFailedTasks if stage is not None else 0
    return failed


def _spark_failure(text: str) -> str:
    """The task's own error out of a Spark job failure (a Python traceback inside a Java one)."""
    cause = re.search(r"(spark_ingest\.errors\.\w+: [^\n]+|app\.\S+Error: [^\n]+)", text)
    return cause.group(1) if cause else text.splitlines()[0][:500]


def _row_offsets(frame: DataFrame, fmt: str) -> dict[tuple[str, int], int]:
    """Absolute row index of each split's first row (text formats; Parquet reports row indexes itself)."""
    if fmt == "parquet":
        return {}
    counts = frame.groupBy("_file", "_start").count().collect()
    return split_offsets(count_by_split((r["_file"], r["_start"], r["count"]) for r in counts), per_file=True)


def _write_rejects(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        for row in rows:
            handle.write(
                orjson.dumps(
                    {"file": row["file"], "row": row["row"], "reason": row["reason"], "raw": row["raw"]}
                )
            )
            handle.write(b"\n")


def run_ingest(
    options: IngestOptions,
    settings: Settings | None = None,
    spark: SparkSession | None = None,
    tracker: BatchTracker | None = None,
    report: Report = lambda line: print(line, file=sys.stderr, flush=True),
    progress: IngestProgress | None = None,
) -> IngestSummary:
    """Produce every valid row of `options.path` into composite topic `options.topic`; returns the summary.

    `report` gets the job's milestones as lines; `progress` its tasks and batch state (default:
    lines through `report` every `options.progress_interval_s`)."""
    settings = settings or get_settings()
    progress = progress or TextProgress(report, options.progress_interval_s)
    store = MetadataStore.of(settings)
    try:
        storage = store.get(options.topic).current
    finally:
        store.close()
    fmt = detect_format(options.path, options.input_format)
    startup_s = 0.0
    if spark is None:
        began = time.monotonic()
        spark = build_session(options.master, max_task_failures=options.max_task_failures)
        warm_up(spark)
        startup_s = time.monotonic() - began
    started = time.monotonic()
    frame = read_input(spark, options.path, fmt)
    plan = IngestPlan(
        input_root=str(Path(options.path).resolve()) if "://" not in options.path else options.path,
        input_format=fmt,
        composite_topic=options.topic,
        metadata_topic=settings.metadata_topic,
        metadata_refresh_s=settings.metadata_refresh_s,
        max_group_id_bytes=settings.max_group_id_bytes,
        replication_factor=settings.kafka_replication_factor,
        producer_config=producer_config(settings, **{"linger.ms": 20, "batch.size": 1_000_000}),
        max_payload_bytes=settings.max_payload_bytes,
        row_offsets=_row_offsets(frame, fmt),
        broker_kind=settings.broker_kind,
        crash_at=options.crash_at,
    )
    report(
        f"ingest {options.path} ({fmt}) -> {options.topic} = {storage.name} "
        f"({storage.partitions} partitions, K={storage.k})"
    )
    if options.batch:
        tracker = tracker or HttpBatchTracker(
            options.batch_url or f"http://{settings.web_host}:{settings.web_port}",
            admin_token=settings.admin_token.get_secret_value() if settings.admin_token else None,
            retry_for_s=max(30.0, options.wait_timeout_s / 4),
        )
        counted = _collect(
            _map(spark, frame, plan, count_valid_batches, COUNT_SCHEMA),
            spark,
            progress,
            "counting valid rows",
        ).rows
        valid = count_by_split((r["file"], r["start"], r["valid"]) for r in counted)
        assignment = open_assignment(
            tracker, options.batch_user_key or f"spark-ingest:{options.path}", sum(valid.values())
        )
        plan = replace(plan, items=assignment, item_offsets=split_offsets(valid, per_file=False))
        report(f"batch {assignment.batch_id} opened with {assignment.items} items")
    produced_job = _collect(
        _map(spark, frame, plan, produce_batches, RESULT_SCHEMA),
        spark,
        progress,
        "producing",
    )
    results = produced_job.rows
    duration_s = time.monotonic() - started
    rejects = [r for r in results if r["kind"] == "reject"]
    stats = [r for r in results if r["kind"] == "stats"]
    rejects_file = options.rejects or _default_rejects(settings)
    _write_rejects(rejects_file, rejects)
    produced = sum(r["produced"] for r in stats)
    summary = IngestSummary(
        input=options.path,
        format=fmt,
        topic=options.topic,
        storage_topic=storage.name,
        rows_read=sum(r["rows"] for r in stats),
        rejected=len(rejects),
        produced=produced,
        duration_s=round(duration_s, 3),
        rate_per_s=round(produced / duration_s, 1) if duration_s > 0 else 0.0,
        rejects_file=str(rejects_file),
        startup_s=round(startup_s, 3),
        failed_tasks=produced_job.failed_tasks,
        batch_id=plan.items.batch_id if plan.items else None,
    )
    if plan.items is not None and tracker is not None:
        tracker.close(plan.items.batch_id)
        report(f"batch {plan.items.batch_id} closed")
        state = tracker.state(plan.items.batch_id)
        progress.batch(state)
        complete = state.is_complete
        if options.wait and not complete:
            state = wait_complete(
                tracker,
                plan.items.batch_id,
                options.wait_timeout_s,
                on_poll=lambda polled, _elapsed: progress.batch(polled),
            )
            complete = state.is_complete
        summary = replace(summary, batch_complete=complete)
    return summary


def _map(
    spark: SparkSession,
    frame: DataFrame,
    plan: IngestPlan,
    body: Callable[[Iterator[pa.RecordBatch], IngestPlan], Iterator[pa.RecordBatch]],
    schema: str,
) -> DataFrame:
    shared = spark.sparkContext.broadcast(plan)
    return frame.mapInArrow(lambda batches: body(batches, shared.value), schema)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark_ingest/job.py", description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--format", dest="input_format", choices=["parquet", "csv", "jsonl"])
    parser.add_argument("--master", help="default: spark-submit's --master (local[*] when not given)")
    parser.add_argument("--rejects", type=Path)
    parser.add_argument("--batch", action="store_true")
    parser.add_argument("--wait", action="store_true")
    parser.add_argument("--batch-url")
    parser.add_argument("--batch-user-key")
    parser.add_argument("--wait-timeout-s", type=float, default=600.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point; prints the summary as one JSON line on stdout."""
    args = _parser().parse_args(argv)
    try:
        summary = run_ingest(IngestOptions(**vars(args)))
    except HubstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if exc.http_status == 400 else 1
    print(orjson.dumps(summary.to_json()).decode())
    return 0 if summary.batch_complete is not False or not args.wait else 1


if __name__ == "__main__":
    sys.exit(main())
