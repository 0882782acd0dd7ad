"""--batch --wait against the real exact-batch API of a worker.

The hub's subscription (which acks an item once the hub saved its event) is not wired yet, so a
consumer thread here stands in for it: it reads the produced events and acks their batch item ids.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from app.batch.client import BatchClient
from app.composite.model import StorageTopic
from app.settings import Settings
from spark_ingest.job import IngestOptions, run_ingest
from spark_ingest.sample import SampleSpec, generate
from tests.support.ports import free_port
from tests.support.spawn import spawn_logged
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]
REPO = Path(__file__).resolve().parents[3]


@contextmanager
def worker(
    env: dict[str, str], log: Path, capabilities: tuple[str, ...] = (), timeout_s: float = 90.0
) -> Iterator[str]:
    """A worker subprocess on a free port; yields its base URL once it serves every batch partition."""
    port = free_port()
    env = dict(env, WEB_PORT=str(port))
    partitions = int(env["TABLE_PARTITIONS"])
    proc = spawn_logged(
        [sys.executable, "-m", "tests.support.run_worker", *capabilities],
        log,
        append=False,
        cwd=REPO,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        assert proc.poll() is None, f"worker died:\n{log.read_text()[-3000:]}"
        with urllib.request.urlopen(f"{url}/api/v1/batch/status", timeout=2) as response:
            return sorted(orjson.loads(response.read())["partitionsServed"]) == list(range(partitions))

    try:
        try:
            wait_until(serving, timeout_s, "the worker to serve", poll_s=0.3, retry_on=(OSError,))
        except AssertionError as exc:
            if proc.poll() is not None:
                raise  # it died: the message carries its log
            raise AssertionError(f"{exc}:\n{log.read_text()[-3000:]}") from None
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def worker_env(settings: Settings, unique: str, home: Path, **extra: str) -> dict[str, str]:
    """Own app id, datadir and topics, low rebalance timeouts."""
    return dict(
        os.environ,
        HUBSTREAM_APP_ID=f"ingest-{unique}",
        HUBSTREAM_HOME=str(home),
        KAFKA_BOOTSTRAP=settings.bootstrap,
        KAFKA_BROKER_KIND=settings.broker_kind,
        TABLE_PARTITIONS="2",
        BATCH_ACKS_TOPIC=f"batch-acks-{unique}",
        BATCH_COMPLETIONS_TOPIC=f"batch-completions-{unique}",
        BROKER_SESSION_TIMEOUT_S="3",
        BROKER_REBALANCE_TIMEOUT_S="3",
        **extra,
    )


@pytest.fixture
def batch_api(kafka: Settings, unique: str, tmp_path: Path) -> Iterator[str]:
    """A worker serving the batch API on a free port, with its own app id and topics."""
    with worker(worker_env(kafka, unique, tmp_path / "worker"), tmp_path / "worker.log") as url:
        yield url


def _ack_as_consumed(settings: Settings, storage: StorageTopic, url: str, stop: threading.Event) -> list[str]:
    """Stand-in for the hub: ack each event's batch item id as it arrives."""
    acked: list[str] = []
    client = BatchClient(url)
    consumer = Consumer(
        {"bootstrap.servers": settings.bootstrap, "group.id": "ingest-acker", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(storage.name, p, 0) for p in range(storage.partitions)])
    try:
        while not stop.is_set():
            item_ids = []
            for msg in consumer.consume(5000, timeout=0.5):
                if msg.error() is None:
                    item_ids.append(orjson.loads(msg.value())["batch_item_id"])
            if item_ids:
                client.ack(item_ids)
                acked.extend(item_ids)
    finally:
        consumer.close()
        client.close()
    return acked


def test_batch_wait_completes_once_every_event_is_acked(
    spark: SparkSession, kafka: Settings, composite: StorageTopic, batch_api: str, tmp_path: Path
) -> None:
    spec = SampleSpec(rows=2000, recipients=40, invalid=10)
    path = tmp_path / "in.parquet"
    generate(spec, path, "parquet")
    stop = threading.Event()
    acked: list[str] = []
    acker = threading.Thread(
        target=lambda: acked.extend(_ack_as_consumed(kafka, composite, batch_api, stop)), daemon=True
    )
    acker.start()
    try:
        summary = run_ingest(
            IngestOptions(
                str(path),
                composite.name.rsplit(".", 1)[0],
                rejects=tmp_path / "r.jsonl",
                batch=True,
                wait=True,
                batch_url=batch_api,
                batch_user_key="bulk-1",
                wait_timeout_s=60,
            ),
            settings=kafka,
            spark=spark,
            report=lambda _line: None,
        )
    finally:
        stop.set()
        acker.join(10)
    assert summary.produced == spec.rows - spec.invalid
    assert summary.batch_complete is True
    assert len(set(acked)) == summary.produced
    with BatchClient(batch_api) as client:
        state = client.get_exact(int(str(summary.batch_id)))
    assert (state["isComplete"], state["isClosed"], state["userKey"]) == (True, True, "bulk-1")
