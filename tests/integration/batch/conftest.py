"""Batch workers as subprocesses (the real worker: agents.build_worker), one Faust app id
and fresh topics per module, so tests never share a consumer group or a table with anyone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from app.batch.acks import AckProducer
from app.batch.client import BatchClient
from app.settings import Settings
from tests.support.ports import free_port
from tests.support.spawn import spawn_logged
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 4


@dataclass
class BatchWorker:
    proc: subprocess.Popen[bytes]
    url: str
    home: Path
    env: dict[str, str] = field(repr=False)

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/api/v1/batch/status", timeout=5) as response:
            data: dict[str, Any] = orjson.loads(response.read())
            return data

    def log(self) -> str:
        return (self.home / "worker.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(5)


def send_acks(env: dict[str, str], item_ids: list[str]) -> int:
    """Produce acks for `item_ids` to the worker's ack topic, confirmed; returns the record count."""
    producer = AckProducer(env["KAFKA_BOOTSTRAP"], env["BATCH_ACKS_TOPIC"], PARTITIONS)
    records = producer.send(item_ids)
    assert producer.flush() == 0
    return records


def worker_env(stack: Settings, unique: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HUBSTREAM_APP_ID=f"batch-test-{unique}",
        KAFKA_BOOTSTRAP=stack.bootstrap,
        KAFKA_BROKER_KIND=stack.broker_kind,
        TABLE_PARTITIONS=str(PARTITIONS),
        BATCH_ACKS_TOPIC=f"batch-acks-{unique}",
        BATCH_COMPLETIONS_TOPIC=f"batch-completions-{unique}",
        BROKER_SESSION_TIMEOUT_S="3",
        BROKER_REBALANCE_TIMEOUT_S="3",
        OFFSET_FLUSH_INTERVAL_S="0.5",
    )
    env.update(extra)
    return env


def start_worker(env: dict[str, str], home: Path) -> BatchWorker:
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    env = dict(env, HUBSTREAM_HOME=str(home), WEB_PORT=str(port), WEB_HOST="127.0.0.1")
    proc = spawn_logged(
        [sys.executable, "-m", "tests.support.run_worker"], home / "worker.log", cwd=REPO, env=env
    )
    return BatchWorker(proc, f"http://127.0.0.1:{port}", home, env)


def wait_serving(workers: list[BatchWorker], timeout_s: float = 60.0) -> None:
    """Until the workers together serve every table partition exactly once, each at least one."""

    def serving() -> bool:
        for worker in workers:
            assert worker.proc.poll() is None, f"worker died:\n{worker.log()[-3000:]}"
        by_worker = [w.status()["partitionsServed"] for w in workers]
        served = [p for ps in by_worker for p in ps]
        return sorted(served) == list(range(PARTITIONS)) and all(by_worker)

    wait_until(serving, timeout_s, "the workers to serve all partitions", poll_s=0.3, retry_on=(OSError,))


def read_completions(bootstrap: str, topic: str, timeout_s: float = 2.0) -> list[dict[str, Any]]:
    """Every completion event on the topic so far."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        events: list[dict[str, Any]] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            events.append(orjson.loads(msg.value() or b"null"))
        return events
    finally:
        consumer.close()


def live_and_gone(client: BatchClient, live_items: int) -> tuple[int, list[str], str]:
    """A closed batch with `live_items` items (its ids), and the one item of a batch that was
    closed and expired (gone): (live batch id, its item ids, the gone item's id)."""
    live, gone = client.create_exact(), client.create_exact()
    items = client.add_item_ids(live, live_items)
    [gone_item] = client.add_item_ids(gone, 1)
    client.close_exact(gone)
    client.delete_expired(closed=True, since=datetime.now(UTC) + timedelta(minutes=1))
    client.close_exact(live)
    return live, items, gone_item


def wait_for(predicate: Any, timeout_s: float = 30.0, what: str = "condition") -> Any:
    return wait_until(predicate, timeout_s, what, poll_s=0.1)


@pytest.fixture
def batch_client() -> Iterator[Callable[[str], BatchClient]]:
    """Opens clients of a worker's batch API; each is closed (its sockets too) when the test ends."""
    with contextlib.ExitStack() as opened:
        yield lambda url: opened.enter_context(BatchClient(url))


@pytest.fixture(scope="module")
def module_unique() -> str:
    return f"{time.time_ns() % 10**10:x}"


@pytest.fixture(scope="module")
def batch_worker(
    stack: Settings, module_unique: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BatchWorker]:
    worker = start_worker(worker_env(stack, module_unique), tmp_path_factory.mktemp("batch-worker"))
    try:
        wait_serving([worker])
        yield worker
    finally:
        worker.stop()
