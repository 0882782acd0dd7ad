"""Spark side of the input: the session and the reader that adds each row's split and row index."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_ingest.errors import InputSchemaError
from spark_ingest.schema import FORMATS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS, missing_columns

__all__ = ["build_session", "detect_format", "local_master", "read_input", "warm_up"]

_LOCAL = re.compile(r"^local\[(\*|\d+)\]$")
SMALL_SESSION: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    # Cut even small inputs into several splits so every core works and progress moves;
    # ids do not depend on how files are split (see spark_ingest.plan).
    "spark.sql.files.openCostInBytes": "262144",
    # The JVM only reads files and hands Arrow batches to Python: the quick C1 JIT is enough, and the
    # C2 compiler threads would take CPU from the Python workers (measured: ~1.5x faster first runs).
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}
TASKS_PER_CORE = 4
# A local session logs errors only (its JVM's start-up warnings would interleave with progress).
LOCAL_LOGGING = Path(__file__).with_name("log4j2.properties")


def local_master(master: str, max_task_failures: int) -> str:
    """`local[N]` never retries a failed task; `local[N,F]` does. Add F so delivery failures are retried."""
    match = _LOCAL.match(master)
    return f"local[{match.group(1)},{max_task_failures}]" if match else master


def build_session(
    master: str | None,
    app_name: str = "hubstream-spark-ingest",
    max_task_failures: int = 4,
    conf: Mapping[str, str] = {},
) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter (the one that has hubstream installed).

    `master=None` keeps the master spark-submit (or spark-defaults) chose.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    settings = {**SMALL_SESSION, "spark.task.maxFailures": str(max_task_failures)}
    if master is not None:
        builder = builder.master(local_master(master, max_task_failures))
    if master is not None and _LOCAL.match(master):
        # This machine only: no warning that its hostname resolves to a loopback address, and
        # Spark's own log at errors only.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        java = settings["spark.driver.extraJavaOptions"]
        settings["spark.driver.extraJavaOptions"] = (
            f"{java} -Dlog4j2.configurationFile={LOCAL_LOGGING.as_uri()}"
        )
    for key, value in {**settings, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if "spark.sql.files.minPartitionNum" not in conf:
        parallelism = session.sparkContext.defaultParallelism
        session.conf.set("spark.sql.files.minPartitionNum", str(TASKS_PER_CORE * parallelism))
    session.sparkContext.setLogLevel("ERROR")
    return session


def _import_executor(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import spark_ingest.executor  # noqa: F401  (loads app/*, confluent-kafka and orjson in the worker)

    yield from batches


def warm_up(session: SparkSession) -> None:
    """Start the Python workers and import the executor code once, so the first ingest does not pay for it."""
    slots = session.sparkContext.defaultParallelism
    session.range(slots, numPartitions=slots).mapInArrow(_import_executor, "id long").collect()


def detect_format(path: str, given: str | None) -> str:
    """The format named by --format, else by the file extension (a directory defaults to parquet)."""
    if given is not None:
        if given not in FORMATS:
            raise InputSchemaError(f"format {given!r} is not one of {', '.join(FORMATS)}")
        return given
    lowered = path.lower().rstrip("/")
    for suffix, fmt in ((".csv", "csv"), (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "jsonl")):
        if lowered.endswith(suffix):
            return fmt
    return "parquet"


def read_input(spark: SparkSession, path: str, fmt: str) -> DataFrame:
    """The input as a DataFrame: known columns plus `_file`, `_start` (the split) and `_row` (Parquet only).

    CSV cells stay text (validated in Python, so "12kB" is a reject with a reason, not a null);
    JSON lines stay text too, so each line is parsed and type-checked exactly as the hub would.
    """
    try:
        if fmt == "parquet":
            frame = spark.read.parquet(path)
        elif fmt == "csv":
            frame = spark.read.option("header", "true").option("inferSchema", "false").csv(path)
        else:
            frame = spark.read.text(path)
    except Exception as exc:  # Spark raises AnalysisException for missing paths and unreadable files
        raise InputSchemaError(f"cannot read {path} as {fmt}: {str(exc).splitlines()[0]}") from exc
    split = [F.col("_metadata.file_path").alias("_file"), F.col("_metadata.file_block_start").alias("_start")]
    if fmt == "jsonl":
        return frame.select("value", *split)
    missing = missing_columns(frame.columns)
    if missing:
        raise InputSchemaError(f"{path}: {fmt} input lacks column(s) {', '.join(missing)}")
    known = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if c in frame.columns]
    row = [F.col("_metadata.row_index").alias("_row")] if fmt == "parquet" else []
    return frame.select(*known, *split, *row)
