"""Helpers for subscription integration tests: worker subprocesses, a failing HTTP endpoint and
the order rule over its delivery log.

Subscriptions need only the broker, so `stack` and `metadata` are overridden here to start or
reuse the broker alone: a busy Cosmos endpoint must not fail these tests. A broker that does not
answer fails them loudly.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiohttp import web

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import OnDlq, RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.registry import SubscriptionRegistry
from tests.support.spawn import spawn_logged
from tests.unit.modelcheck.endpoint_order import Seen


@pytest.fixture(scope="session")
def stack(kafka: Settings) -> Settings:
    """Subscriptions need only the broker (the shared `metadata` fixture builds on `stack`)."""
    return kafka


@dataclass
class Workers:
    home: Path
    app_id: str
    settings: Settings
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # more of the workers' and CLI's environment

    @property
    def registry_topic(self) -> str:
        return f"__subs-{self.app_id}"

    def settings_of_workers(self) -> Settings:
        """The settings as the workers see them (their app id: their group states' changelog)."""
        return self.settings.model_copy(update={"app_id": self.app_id})

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HUBSTREAM_HOME": str(self.home),
            "HUBSTREAM_APP_ID": self.app_id,
            "KAFKA_BOOTSTRAP": self.settings.bootstrap,
            "KAFKA_BROKER_KIND": self.settings.broker_kind,
            # a registry of its own, so test workers never run other tests' subscriptions
            "SUBSCRIPTION_REGISTRY_TOPIC": self.registry_topic,
            **self.env,
        }

    def cli(self, *args: str) -> Any:
        """`hubstream ARGS` as an operator runs it against these workers; its JSON answer.
        AssertionError with its output when it exits non-zero."""
        done = subprocess.run(
            [sys.executable, "-m", "app.cli.main", *args],
            env=self._env(),
            cwd=Path(__file__).resolve().parents[3],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, f"hubstream {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
        return json.loads(done.stdout)

    def start(self, web_port: int, **extra_env: str) -> subprocess.Popen[bytes]:
        env = {
            **self._env(),
            "WEB_PORT": str(web_port),
            "BROKER_SESSION_TIMEOUT_S": "6",
            "BROKER_REBALANCE_TIMEOUT_S": "6",
            "COMPOSITE_METADATA_REFRESH_S": "1",
            **extra_env,
        }
        proc = spawn_logged(
            [sys.executable, "-m", "app.cli.main", "worker", "--loglevel", "info"],
            self.home / f"worker-{web_port}.log",
            env=env,
            cwd=Path(__file__).resolve().parents[3],
        )
        self.procs[web_port] = proc
        return proc

    def kill9(self, web_port: int) -> None:
        proc = self.procs.pop(web_port)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()


@pytest.fixture
def workers(stack: Settings, tmp_path: Path, unique: str) -> Iterator[Workers]:
    w = Workers(tmp_path, f"subtest-{unique}", stack)
    yield w
    w.stop_all()


@dataclass
class Endpoint:
    """Delivery log per group; fails on purpose: `transient` groups answer 503 for their first
    attempts of each message, `broken` message ids answer 404 for good."""

    url: str = ""
    transient: set[str] = field(default_factory=set)
    transient_failures: int = 2
    broken: set[str] = field(default_factory=set)
    delivered: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    attempts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    seq_attempts: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    async def handle(self, request: web.Request) -> web.Response:
        group = request.headers["X-Group-Id"]
        message_id = request.headers["X-Message-Id"]
        seq = int((await request.read()).decode().split(":")[1])
        self.attempts[message_id] += 1
        self.seq_attempts[seq] += 1
        if seq in self.broken_seqs():
            return web.Response(status=404)
        if group in self.transient and self.attempts[message_id] <= self.transient_failures:
            return web.Response(status=503)
        self.delivered[group].append(seq)
        return web.Response(status=204)

    def broken_seqs(self) -> set[int]:
        return {int(s) for s in self.broken}


@contextlib.asynccontextmanager
async def serving(ep: Endpoint) -> AsyncIterator[Endpoint]:
    """`ep` answering POSTs on a loopback port of its own (its `url`) while the block runs."""
    app = web.Application()
    app.router.add_post("/deliver", ep.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    ep.url = f"http://127.0.0.1:{port}/deliver"
    try:
        yield ep
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    async with serving(Endpoint()) as ep:
        yield ep


def assert_group_order(endpoint: Endpoint, produced: Iterable[int], groups: int) -> None:
    """The order rule, per group, over what `endpoint` took of the messages `produced` (seqs sent
    by `produce_groups` over `groups` groups): a replay may repeat messages, but a group never
    sees an older message after a newer one unless the whole run after it follows again (`Seen`
    of tests/unit/modelcheck/endpoint_order.py), and every group ends on its newest message.
    Whether every message came is the caller's check; a group that took nothing fails here."""
    newest: dict[str, int] = {}
    for seq in produced:
        group = f"g{seq % groups}"
        newest[group] = max(seq, newest.get(group, seq))
    strays = sorted(set(endpoint.delivered) - set(newest))
    assert not strays, f"deliveries for groups never produced: {strays}"
    for group, last in newest.items():
        seqs = endpoint.delivered.get(group, [])
        seen = Seen()
        for seq in seqs:
            seen = seen.took(seq)
        assert seen.broken is None, f"{group}: {seen.broken}: {seqs}"
        assert not seen.expect, f"{group}: a replay never caught up: {seqs}"
        assert seqs and seqs[-1] == last, f"{group} ends on {seqs[-1] if seqs else None}, not {last}"


def started_http_subscription(
    stack: Settings,
    metadata: MetadataStore,
    workers: Workers,
    endpoint: Endpoint,
    name: str,
    backoff_s: float,
) -> tuple[Subscription, SubscriptionRegistry]:
    """A started BLOCK_GROUP subscription `name` of a new topic `name` (2 partitions) delivering
    to `endpoint`, in the workers' registry: five attempts, `backoff_s` between them."""
    metadata.create(name, 2)
    registry = SubscriptionRegistry(
        broker_for(stack), workers.registry_topic, replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        name,
        name,
        EndpointSpec("http", endpoint.url, 5.0),
        retry=RetryPolicy(max_attempts=5, min_backoff_s=backoff_s, max_backoff_s=backoff_s),
        on_dlq=OnDlq.BLOCK_GROUP,
        start=True,
    )
    return sub, registry


def dead_letter_seqs(metadata: MetadataStore, registry: SubscriptionRegistry, name: str) -> list[int]:
    """The sequence numbers of the subscription's DLQ records ("group:seq" payloads), sorted."""
    records = ops.read_dlq(metadata, registry.get(name), None, 1000)
    return sorted(int((r.value() or b"").decode().split(":")[1]) for r in records)


def produce_groups(
    stack: Settings, topic: str, seqs: range, groups: int, produced: dict[str, list[int]] | None = None
) -> None:
    """Messages "g<seq % groups>:<seq>" to composite topic `topic`, keyed by their group; each
    seq noted in `produced` under its group, when given."""
    with CompositeProducer(stack, topic, store=MetadataStore.of(stack)) as producer:
        for seq in seqs:
            g = f"g{seq % groups}"
            producer.produce(g, f"{g}:{seq}")
            if produced is not None:
                produced[g].append(seq)


async def shards_running(web_port: int, subscription: str) -> set[int]:
    """The shards of `subscription` the worker on `web_port` runs now (its /subscriptions/shards)."""
    async with httpx.AsyncClient(timeout=2.0) as http:
        answer = (await http.get(f"http://127.0.0.1:{web_port}/subscriptions/shards")).json()
    return {s["shard"] for s in answer["shards"] if s["subscription"] == subscription and s["running"]}
