"""`hubstream spark …`: bulk-ingest DataAvailable files with Spark, and generate sample input."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from app.cli.common import HubstreamGroup, echo_json
from app.progress import Stages

__all__ = ["spark"]


@click.group(cls=HubstreamGroup)
def spark() -> None:
    """Spark jobs: ingest files of DataAvailable events into a composite topic."""


@spark.command()
@click.argument("path")
@click.option("--topic", required=True, help="composite topic to produce into, e.g. data-available")
@click.option(
    "--format",
    "input_format",
    type=click.Choice(["parquet", "csv", "jsonl"]),
    default=None,
    help="input format (default: from the extension; a directory is parquet)",
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master, e.g. spark://host:7077")
@click.option(
    "--rejects",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON-lines file for invalid rows (default: $HUBSTREAM_HOME/spark_ingest/rejects-<time>.jsonl)",
)
@click.option("--batch", is_flag=True, help="track the events as one exact batch (one item per event)")
@click.option("--wait", is_flag=True, help="with --batch: wait until the batch is complete and report")
@click.option("--batch-url", default=None, help="batch API base URL (default: http://WEB_HOST:WEB_PORT)")
@click.option("--batch-user-key", default=None, help="the batch's userKey (default: spark-ingest:PATH)")
@click.option("--wait-timeout-s", type=float, default=600.0, show_default=True)
@click.option(
    "--progress-interval-s",
    type=float,
    default=10.0,
    show_default=True,
    help="seconds between progress lines when stderr is not a terminal",
)
def ingest(
    path: str,
    topic: str,
    input_format: str | None,
    master: str,
    rejects: Path | None,
    batch: bool,
    wait: bool,
    batch_url: str | None,
    batch_user_key: str | None,
    wait_timeout_s: float,
    progress_interval_s: float,
) -> None:
    """Validate the rows of PATH (file or directory) and produce them into composite topic --topic.

    Shows progress on stderr (a bar per stage on a terminal: Spark's tasks while counting and
    producing, then the batch's acked items) and prints the summary as JSON on stdout. Exits 1
    when --wait timed out before the batch completed.
    """
    from spark_ingest.job import IngestOptions, run_ingest
    from spark_ingest.progress import INGEST_STAGES, StageProgress

    console = Console(stderr=True)
    if wait and not batch:
        raise click.UsageError("--wait needs --batch")
    options = IngestOptions(
        path=path,
        topic=topic,
        input_format=input_format,
        master=master,
        rejects=rejects,
        batch=batch,
        wait=wait,
        batch_url=batch_url,
        batch_user_key=batch_user_key,
        wait_timeout_s=wait_timeout_s,
        progress_interval_s=progress_interval_s,
    )
    if console.is_terminal:
        with Stages(console, INGEST_STAGES) as stages:
            summary = run_ingest(
                options, report=lambda line: console.print(f"  {line}"), progress=StageProgress(stages)
            )
    else:  # a log: a line per interval
        summary = run_ingest(options)
    echo_json(summary.to_json())
    if wait and summary.batch_complete is False:
        click.echo(f"error: batch {summary.batch_id} not complete after {wait_timeout_s:.0f} s", err=True)
        sys.exit(1)


@spark.command()
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--rows", "-n", type=int, default=200_000, show_default=True)
@click.option("--recipients", "-r", type=int, default=1000, show_default=True)
@click.option(
    "--invalid", type=int, default=0, show_default=True, help="rows with a defect (for the rejects file)"
)
@click.option("--format", "output_format", type=click.Choice(["parquet", "csv", "jsonl"]), default="parquet")
@click.option(
    "--files", type=int, default=1, show_default=True, help="more than 1: OUT is a directory of parts"
)
@click.option("--seed", type=int, default=7, show_default=True)
def sample(
    out: Path, rows: int, recipients: int, invalid: int, output_format: str, files: int, seed: int
) -> None:
    """Write sample DataAvailable rows (weights 1 KB-1 MB, the three domains) to OUT."""
    from spark_ingest.sample import SampleSpec, generate

    if rows < 1 or recipients < 1 or not 0 <= invalid <= rows or files < 1:
        raise click.UsageError("need rows >= 1, recipients >= 1, 0 <= invalid <= rows, files >= 1")
    paths = generate(SampleSpec(rows, recipients, invalid, seed), out, output_format, files)
    echo_json({"files": [str(p) for p in paths], "rows": rows, "invalid": invalid})
