"""A subscription with retries on the durable embedded broker (EMBEDDED_BROKER_STORAGE=s3) while
the broker is SIGKILLed and started again: two workers, 2 shards, a quarter of the groups failing
their first two attempts (so RQ copies, group states and commits are in flight at the kill).
Counted at the endpoint: every message delivered, per group never an older message after a newer
one unless the whole run follows again, and every group ends on its newest message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.subscription import ops
from app.subscription.model import EndpointSpec, RetryPolicy
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.conftest import Endpoint, Workers, assert_group_order, produce_groups
from tests.support.durable_broker import durable_broker
from tests.support.waiting import async_wait_until

MESSAGES, GROUPS, CHUNKS = 6_000, 120, 3


async def test_a_subscription_with_retries_survives_broker_restarts(
    endpoint: Endpoint, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with durable_broker(tmp_path / "broker", monkeypatch) as broker:
        settings = broker.settings
        metadata = MetadataStore.of(settings)
        workers = Workers(tmp_path, f"subtest-{unique}", settings)
        try:
            topic = f"restart-{unique}"
            metadata.create(topic, 4)
            endpoint.transient = {f"g{i}" for i in range(0, GROUPS, 4)}
            registry = SubscriptionRegistry(
                broker_for(settings), workers.registry_topic, replication_factor=1
            )
            ops.create(
                registry,
                metadata,
                topic,
                topic,
                EndpointSpec("http", endpoint.url, 5.0),
                shard_count=2,
                retry=RetryPolicy(max_attempts=6, min_backoff_s=0.2, max_backoff_s=0.5),
                start=True,
            )
            base = 17900 + int(unique[:4], 16) % 90
            workers.start(base)
            workers.start(base + 1)
            step = MESSAGES // CHUNKS
            for chunk in range(CHUNKS):
                seqs = range(chunk * step, (chunk + 1) * step)
                await asyncio.to_thread(produce_groups, settings, topic, seqs, GROUPS)
                target = (chunk + 1) * step // 2  # mid-chunk: deliveries and retries under way
                await async_wait_until(
                    lambda target=target: len({s for v in endpoint.delivered.values() for s in v}) >= target,
                    180,
                    f"{target} messages delivered",
                )
                await asyncio.to_thread(broker.restart)

            def every_message() -> bool:
                assert all(proc.poll() is None for proc in workers.procs.values()), "a worker died"
                return len({s for v in endpoint.delivered.values() for s in v}) == MESSAGES

            await async_wait_until(every_message, 300, "every message delivered after the restarts")
            assert broker.restarts == CHUNKS
            assert_group_order(endpoint, range(MESSAGES), GROUPS)
            retried = sum(1 for n in endpoint.seq_attempts.values() if n > 1)
            print(f"{broker.restarts} broker restarts; {retried} messages retried; all {MESSAGES} delivered")
        finally:
            workers.stop_all()
            metadata.close()
