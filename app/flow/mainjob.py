"""The main job (`hubstream run`, what `make run` runs): the whole flow on the embedded stack.

1. start the stack and two workers; create `data-available`, the `hub-feed` subscription (batch
   sink `hub`) and the MySQL mirror pipeline;
2. generate a sample of DataAvailable events (with a few invalid rows) and ingest it with Spark
   under an exact batch;
3. wait until the batch is complete and the mirror has caught up;
4. every actor peeks and dequeues until its hub is empty, concurrently, through the HTTP API;
5. print counts read back from Kafka, MySQL and what the actors saw (never in-process counters).
Every step is idempotent: a second run reuses the topic, the subscription and the pipeline.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pymysql
import yaml
from rich.console import Console

from app.composite.store import MetadataStore
from app.errors import ServiceUnavailable
from app.flow.actors import DrainReport, drain_actors
from app.flow.readback import (
    Offsets,
    SubscriptionTopics,
    completions_seen,
    copy_reasons,
    ends,
    partitions,
    since,
    subscription_topics,
)
from app.flow.watch import FLOW_STAGES, FlowWatch
from app.hub.tokens import TokenRules
from app.kafka.broker import broker_for
from app.ordered.policy import RetryPolicy
from app.progress import StageFigures, Stages, stage_timeline
from app.settings import Settings
from app.stack import stack_up
from app.stack.broker import broker_process
from app.stack.process import ManagedProcess
from app.stack.services import start_workers, url_answers, web_answers
from app.subscription import ops
from app.subscription.model import EndpointSpec, Status
from app.subscription.registry import SubscriptionRegistry
from app.waiting import poll_until

__all__ = [
    "MIRROR_TABLE",
    "MainJobOptions",
    "broker_incarnation",
    "mirror_rows",
    "prepare_mirror",
    "run_main_job",
]

PIPELINE_EXAMPLE = (
    Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "data_available_mysql.yaml"
)
MIRROR_TABLE = "data_available"
MIRROR_DDL = (
    f"CREATE TABLE IF NOT EXISTS {MIRROR_TABLE} (id VARCHAR(64) PRIMARY KEY, recipient VARCHAR(256),"
    " origin VARCHAR(64), message_type VARCHAR(256), weight INT, bundleable BOOL, batch_item_id VARCHAR(64))"
)
# The broker whose batches the mirror table's rows belong to (one row).
MIRROR_BROKER_DDL = (
    f"CREATE TABLE IF NOT EXISTS {MIRROR_TABLE}_broker (k TINYINT PRIMARY KEY, broker VARCHAR(512))"
)


@dataclass(frozen=True)
class MainJobOptions:
    events: int = 200_000
    recipients: int = 1000
    invalid: int = 25
    workers: int = 2
    partitions: int = 12
    shards: int = 2
    timeout_s: float = 1800.0
    topic: str = "data-available"
    subscription: str = "hub-feed"
    worker_urls: tuple[str, ...] = ()  # workers run elsewhere, by their URLs: none started here

    def worker_bases(self, settings: Settings) -> list[str]:  # batch API on the first, actors on all
        local = [f"http://127.0.0.1:{settings.web_port + i}" for i in range(self.workers)]
        return [url.rstrip("/") for url in self.worker_urls] or local


def _say(console: Console, text: str) -> None:
    console.print(f"[bold cyan]hubstream run[/] {text}")


def _wait(what: str, check: Callable[[], bool], timeout_s: float, every_s: float = 1.0) -> None:
    if not poll_until(check, timeout_s, every_s):
        raise ServiceUnavailable(f"timed out after {timeout_s:.0f} s waiting for: {what}")


def _ensure_topology(settings: Settings, options: MainJobOptions) -> None:
    metadata = MetadataStore.of(settings)
    registry = SubscriptionRegistry.of(settings)
    try:
        metadata.create(options.topic, options.partitions, exist_ok=True)
        if options.subscription not in registry.refresh():
            ops.create(
                registry,
                metadata,
                options.subscription,
                options.topic,
                # A call of SUBSCRIPTION_BATCH_MAX messages takes ~5 s on a quiet 2-core machine; a
                # timeout cancels a save that was going to finish and delivers it all again.
                EndpointSpec("batch", "hub", timeout_s=180.0),
                shard_count=options.shards,
                # A worker killed mid-save leaves its claim for up to HUB_SAVE_LEASE_S (15 s; a live
                # save renews it); until then the redelivered events are refused as SaveInProgress.
                # 1 s doubling to 60 s: 243 s in all.
                retry=RetryPolicy(max_attempts=10, min_backoff_s=1.0, max_backoff_s=60.0),
                start=True,
            )
        else:
            ops.set_status(registry, options.subscription, Status.RUNNING)
    finally:
        metadata.close()
        registry.close()


def _mysql(settings: Settings) -> Any:
    return pymysql.connect(**settings.mysql.connect_args())


def mirror_rows(settings: Settings, batch_id: str | None = None) -> int:
    """Rows in the mirror table; with `batch_id`, only the rows this run's batch delivered (MySQL
    outlives the embedded stack, so the table may hold earlier runs' events)."""
    conn = _mysql(settings)
    try:
        with conn.cursor() as cur:
            cur.execute(MIRROR_DDL)
            if batch_id is None:
                cur.execute(f"SELECT COUNT(*) FROM {MIRROR_TABLE}")
            else:
                cur.execute(
                    f"SELECT COUNT(*) FROM {MIRROR_TABLE} WHERE batch_item_id LIKE %s", (f"{batch_id}:%",)
                )
            row = cur.fetchone()
            return int(row[0]) if row else 0
    finally:
        conn.close()


def broker_incarnation(settings: Settings) -> str:
    """Which broker this is, as far as batch ids go: each embedded broker (its pid file, written as
    it starts) numbers batches from 1 again; a configured broker keeps numbering them."""
    if not settings.embedded_kafka:
        return f"configured:{settings.bootstrap}"
    pid_file = broker_process(settings).pid_file
    try:
        return f"embedded:{pid_file.read_text().strip()}:{pid_file.stat().st_mtime_ns}"
    except OSError:
        return f"embedded:{settings.bootstrap}"


def prepare_mirror(settings: Settings, broker: str) -> None:
    """Create the mirror table; empty it when its rows came from another broker than `broker`
    (broker_incarnation): batch ids start again from 1 with each embedded broker, and the rows of
    an earlier broker's batch would be counted as this run's. MySQL outlives the embedded stack,
    whether this run or an earlier `hubstream stack up` started the broker."""
    conn = _mysql(settings)
    try:
        with conn.cursor() as cur:
            cur.execute(MIRROR_DDL)
            cur.execute(MIRROR_BROKER_DDL)
            cur.execute(f"SELECT broker FROM {MIRROR_TABLE}_broker WHERE k = 1")
            row = cur.fetchone()
            if row is None or row[0] != broker:
                cur.execute(f"DELETE FROM {MIRROR_TABLE}")
                cur.execute(f"REPLACE INTO {MIRROR_TABLE}_broker (k, broker) VALUES (1, %s)", (broker,))
        conn.commit()
    finally:
        conn.close()


def _pipeline_process(settings: Settings, topic: str) -> ManagedProcess:
    """The mirror pipeline runs as its own process (its own Faust app and datadir), from the
    example definition with this run's topic."""
    home = settings.home / "pipeline-mirror"
    home.mkdir(parents=True, exist_ok=True)
    definition = yaml.safe_load(PIPELINE_EXAMPLE.read_text())
    definition["name"] = f"{topic}-mysql"
    definition["reader"]["topic"] = topic
    path = home / "pipeline.yaml"
    path.write_text(yaml.safe_dump(definition))
    port = settings.web_port + 10
    argv = [sys.executable, "-m", "app.cli.main", "pipeline", "run", str(path), "--loglevel", "warn"]
    return ManagedProcess(
        name="pipeline-mirror",
        argv=argv,
        home=settings.home,
        healthy=lambda: web_answers("127.0.0.1", port),
        env={"HUBSTREAM_HOME": str(home), "PIPELINE_WEB_PORT": str(port)},
        start_timeout_s=120.0,
    )


def _pending(settings: Settings, options: MainJobOptions) -> int:
    """Records the subscription has not consumed yet, in MQ and RQ (read from Kafka)."""
    metadata = MetadataStore.of(settings)
    registry = SubscriptionRegistry.of(settings)
    try:
        lag = ops.queue_lag(registry, metadata, options.subscription)
        return sum(s["mq_lag"] + s["rq_lag"] for s in lag["shards"])
    finally:
        metadata.close()
        registry.close()


def _run_input(settings: Settings, options: MainJobOptions, console: Console) -> Path:
    """This run's input: the cached sample under a path of its own. Event ids derive from the
    input file and row, so each run's events are new to the hub and its actors drain them all
    (the same file again would be recognised as already saved)."""
    from spark_ingest.sample import SampleSpec, generate

    data = settings.home / "data"
    sample = data / f"sample-{options.events}-{options.recipients}-{options.invalid}.parquet"
    if not sample.exists():
        _say(console, f"generating {options.events:,} events for {options.recipients:,} recipients")
        generate(SampleSpec(options.events, options.recipients, options.invalid), sample)
    runs = data / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for old in runs.glob("run-*.parquet"):
        old.unlink()
    run_input = runs / f"run-{uuid.uuid4().hex[:12]}.parquet"
    os.link(sample, run_input)
    return run_input


# Actors draining at once: with 16 the drain waited on round trips (the endpoint and workers
# used about 150 % of the two cores); market actors are independent of each other.
DRAIN_CONCURRENCY = 64
HUB_STAGE_GRACE_S = 10.0  # how long the drain waits for the hub stage's line, at most


def _drain(
    settings: Settings, bases: list[str], recipients: list[str], expected: int, stages: Stages
) -> DrainReport:
    """Every actor peeks and dequeues until empty, concurrently, through the workers' HTTP actor API."""
    tokens = TokenRules.of(settings)

    def progress(report: DrainReport) -> None:
        stages.update("drain", report.drained, expected)

    # A save killed mid-way hides its retried events for HUB_SAVE_LEASE_S: actors come back that long.
    drained = asyncio.run(
        drain_actors(
            bases,
            tokens,
            recipients,
            expected=expected,
            deadline_s=settings.hub_save_lease_s + 30,
            concurrency=DRAIN_CONCURRENCY,
            progress=progress,
        )
    )
    stages.update("drain", drained.drained, expected)
    stages.finish("drain")
    return drained


@dataclass(frozen=True, slots=True)
class _Before:
    """Where the subscription's topics ended before the run: the run reports what it added."""

    main: Offsets
    retry: Offsets
    dead_letter: Offsets

    @classmethod
    def read(cls, settings: Settings, topics: SubscriptionTopics) -> _Before:
        main, retry, dead_letter = (
            ends(broker_for(settings), partitions(settings, name))
            for name in (topics.main, topics.retry, topics.dead_letter)
        )
        return cls(main, retry, dead_letter)


def run_main_job(
    settings: Settings, options: MainJobOptions, console: Console | None = None
) -> dict[str, Any]:
    from spark_ingest.job import IngestOptions, run_ingest
    from spark_ingest.sample import recipient_ids

    console = console or Console(stderr=True)
    started = time.monotonic()
    _say(console, "starting the embedded stack")
    report = stack_up(settings)
    console.print_json(orjson.dumps(report.as_dict()).decode())
    bases = options.worker_bases(settings)
    if options.worker_urls:
        _say(console, f"using {len(bases)} workers running elsewhere: {', '.join(bases)}")
        for base in bases:  # each answers before the job goes on
            _wait(f"the worker at {base}", functools.partial(url_answers, f"{base}/"), 120.0)
    else:
        _say(console, f"starting {options.workers} workers")
        for line in start_workers(settings, options.workers):
            console.print(f"  {line}")
    _ensure_topology(settings, options)
    prepare_mirror(settings, broker_incarnation(settings))
    _say(console, "starting the MySQL mirror pipeline")
    _pipeline_process(settings, options.topic).start()

    sample = _run_input(settings, options, console)
    topics = subscription_topics(settings, options.subscription)
    before = _Before.read(settings, topics)
    _say(console, "Spark ingest into data-available under an exact batch; the hub and MySQL fill behind it")
    count_rows = functools.partial(mirror_rows, settings)
    with (
        Stages(console, FLOW_STAGES) as stages,
        FlowWatch(settings, stages, before.main, topics.consumer_group, count_rows) as watch,
    ):
        summary = run_ingest(
            IngestOptions(
                path=str(sample),
                topic=options.topic,
                batch=True,
                wait=True,
                batch_url=bases[0],
                wait_timeout_s=options.timeout_s,
            ),
            settings,
            report=lambda line: console.print(f"  {line}"),
            progress=watch,
        )
        _wait(
            "the MySQL mirror catching up",
            lambda: mirror_rows(settings, summary.batch_id) >= summary.produced,
            options.timeout_s,
        )
        # The subscription commits its offsets after the batch's acks: its stage ends a moment
        # later, and its line belongs before the drain's (the drain does not depend on it).
        poll_until(lambda: stages.finished("hub"), HUB_STAGE_GRACE_S, 0.1)
        recipients = recipient_ids(options.recipients)
        _say(console, f"{len(recipients):,} actors drain the hub through Peek/Dequeue")
        drained = _drain(settings, bases, recipients, summary.produced, stages)
    console.print(stages.table())
    produced = since(ends(broker_for(settings), list(before.main)), before.main)
    retries = copy_reasons(broker_for(settings), before.retry)
    dead_letters = copy_reasons(broker_for(settings), before.dead_letter)
    dead_lettered = sum(dead_letters.values())
    figures = stages.figures()
    counts = {
        "events_in": summary.rows_read,
        "rejected": summary.rejected,
        "produced": produced,
        "delivered": produced - _pending(settings, options) - dead_lettered,
        "dead_lettered": dead_lettered,
        "hub_saved": drained.drained,
        "hub_duplicates": drained.duplicates,
        "hub_out_of_order": drained.fifo_violations,
        "drain_events_per_s": round(drained.rate, 1),
        "mysql_rows": mirror_rows(settings, summary.batch_id),
        "batch_complete": bool(summary.batch_complete),
        "completion_events": completions_seen(settings, summary.batch_id),
        "retries": sum(retries.values()),
        "retry_reasons": dict(retries),
        "dead_letter_reasons": dict(dead_letters),
        "stage_seconds": {key: round(f.seconds, 1) for key, f in figures.items()},
        "stage_rates": {key: round(f.rate, 1) for key, f in figures.items()},
        "spark_to_hub_events_per_s": _spark_to_hub_rate(figures, produced),
        "stage_timeline": stage_timeline(figures, started),
        "seconds": round(time.monotonic() - started, 1),
    }
    if retries or dead_letters:
        console.print(
            f"[bold yellow]warning:[/] {sum(retries.values()):,} retries ({_reasons(retries)}) and "
            f"{sum(dead_letters.values()):,} dead letters ({_reasons(dead_letters)}) in this run; "
            "a clean run has none"
        )
    return counts


def _spark_to_hub_rate(figures: dict[str, StageFigures], produced: int) -> float:
    """Events per second from Spark's first task to the hub's last consumed event."""
    spark, hub = figures.get("spark"), figures.get("hub")
    if spark is None or hub is None or hub.ended_at is None or hub.ended_at <= spark.started_at:
        return 0.0
    return round(produced / (hub.ended_at - spark.started_at), 1)


def _reasons(reasons: Counter[str]) -> str:
    return ", ".join(f"{reason} {count:,}" for reason, count in reasons.most_common()) or "none"
