"""Delivery throughput: one subscription shard to an in-process no-op sink (per-message `callable`
kind and `batch` kind) versus a plain Faust agent consuming the same storage topic, same data,
same run. Each rate is timed from the first message seen to the last, so consumer start-up and
group joins are not counted for either side. Prints the figures, the ratios, and a JSON line.

    .venv/bin/python bench/subscription_delivery.py [messages]
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence

import faust
import orjson

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings, get_settings
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.records import SubscriptionMessage
from app.subscription.runner import ShardRunner

PARTITIONS = 4
GROUPS = 1000


class Clock:
    """Counts messages; the rate runs from the first message to the `total`-th."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.seen = 0
        self.first = 0.0
        self.last = 0.0
        self.done = asyncio.Event()

    def tick(self, n: int = 1) -> None:
        if self.seen == 0:
            self.first = time.perf_counter()
        self.seen += n
        if self.seen >= self.total and not self.done.is_set():
            self.last = time.perf_counter()
            self.done.set()

    @property
    def rate(self) -> float:
        return (self.total - 1) / max(self.last - self.first, 1e-9)


async def bench_subscription(settings: Settings, topic: str, total: int, kind: str) -> float:
    metadata = MetadataStore.of(settings)
    sub = Subscription(f"bench-{uuid.uuid4().hex[:8]}", topic, EndpointSpec(kind, "noop"))
    metadata.create(sub.rq_topic, PARTITIONS, exist_ok=True)
    metadata.create(sub.dlq_topic, PARTITIONS, exist_ok=True)
    clock = Clock(total)

    async def noop(_m: SubscriptionMessage) -> None:
        clock.tick()

    async def noop_batch(messages: Sequence[SubscriptionMessage]) -> list[BaseException | None]:
        clock.tick(len(messages))
        return [None] * len(messages)

    if kind == "batch":
        runner = ShardRunner(settings, sub, 0, MemoryStates(), None, metadata, noop_batch)
    else:
        runner = ShardRunner(settings, sub, 0, MemoryStates(), noop, metadata)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(clock.done.wait(), 300)
    runner.stop()
    await task
    for name in (sub.rq_topic, sub.dlq_topic):
        metadata.delete(name)
    metadata.close()
    return clock.rate


async def bench_plain_faust(settings: Settings, topic: str, total: int) -> float:
    app = faust.App(
        f"bench-plain-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{settings.bootstrap}",
        store="memory://",
        web_enabled=False,
        datadir=tempfile.mkdtemp(prefix="bench-faust-"),
        consumer_auto_offset_reset="earliest",
        topic_partitions=PARTITIONS,
        broker_session_timeout=6,
        broker_rebalance_timeout=6,
        broker_heartbeat_interval=1,
    )
    source = app.topic(
        f"{topic}.0", key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    clock = Clock(total)

    # No annotations here: with postponed annotations Faust mis-inspects the agent and never feeds it.
    @app.agent(source)
    async def consume(stream):  # type: ignore[no-untyped-def]
        async for _value in stream:
            clock.tick()

    await app.start()  # (a faust.Worker here sometimes never returned from start() on this broker)
    await asyncio.wait_for(clock.done.wait(), 300)
    await app.stop()
    return clock.rate


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    settings = get_settings()
    metadata = MetadataStore.of(settings)
    topic = f"bench-sub-{uuid.uuid4().hex[:8]}"
    metadata.create(topic, PARTITIONS)
    with CompositeProducer(settings, topic, store=metadata) as producer:
        for i in range(total):
            producer.produce(f"g{i % GROUPS}", b"x" * 100)
    callable_rate = asyncio.run(bench_subscription(settings, topic, total, "callable"))
    batch_rate = asyncio.run(bench_subscription(settings, topic, total, "batch"))
    plain_rate = asyncio.run(bench_plain_faust(settings, topic, total))
    metadata.delete(topic)
    metadata.close()
    print(f"messages: {total:,} of 100 B over {GROUPS} groups, {PARTITIONS} partitions")
    print(f"subscription, 1 shard, callable no-op sink: {callable_rate:,.0f} msg/s")
    print(f"subscription, 1 shard, batch no-op sink:    {batch_rate:,.0f} msg/s")
    print(f"plain Faust agent:                          {plain_rate:,.0f} msg/s")
    print(
        f"ratio callable/plain: {callable_rate / plain_rate:.2f}, batch/plain: {batch_rate / plain_rate:.2f}"
    )
    print("(target >= 0.7)")
    print(
        orjson.dumps(
            {
                "messages": total,
                "subscription_callable_msg_s": round(callable_rate),
                "subscription_batch_msg_s": round(batch_rate),
                "plain_faust_msg_s": round(plain_rate),
                "ratio_callable": round(callable_rate / plain_rate, 3),
                "ratio_batch": round(batch_rate / plain_rate, 3),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
