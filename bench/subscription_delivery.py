"""Delivery throughput: one subscription shard to an in-process no-op sink (per-message `callable`
kind and `batch` kind) versus two baselines reading the same storage topic, same data, same run:
a plain Faust agent, and a raw confluent-kafka poll loop (`consume()` in batches of 1,000, its
own consumer group, assigned the storage topic's partitions from the beginning, no processing,
commit at the end). Each rate is timed from the first message seen to the last, so consumer
start-up and group joins are not counted for any side. With --runs N each side runs N times,
interleaved (raw, callable, batch, plain Faust in every run), and the figures are medians.
Prints the figures, the ratios, and a JSON line: `ratio_callable`/`ratio_batch` are to the plain
Faust agent; `ratio_raw` is the callable shard to the raw poll loop, `ratio_raw_batch` the batch
shard to it (target >= 0.35). A third baseline, the *minimal* loop, is the raw loop that also builds
each message and awaits a no-op callable with it: the least work any per-message delivery in
Python does, with no state, order or commits. `ratio_minimal_raw` says how far below raw that
alone runs, `ratio_callable_minimal` compares the shard with it.

    .venv/bin/python bench/subscription_delivery.py [messages] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence

import faust
import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

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
    """Counts messages; the rate runs from the first tick to the one reaching `total`. The first
    tick's messages (one, or a whole batch) arrived before the clock started, so they are not
    counted: the rate is of the `total - first_n` messages seen within the timed span."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.seen = 0
        self.first_n = 0
        self.first = 0.0
        self.last = 0.0
        self.done = asyncio.Event()

    def tick(self, n: int = 1) -> None:
        if self.seen == 0:
            self.first = time.perf_counter()
            self.first_n = n
        self.seen += n
        if self.seen >= self.total and not self.done.is_set():
            self.last = time.perf_counter()
            self.done.set()

    @property
    def rate(self) -> float:
        if self.first_n >= self.total:
            raise ValueError(f"all {self.total:,} messages came in one batch: give more messages to time")
        return (self.total - self.first_n) / max(self.last - self.first, 1e-9)


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


def _from_the_beginning(settings: Settings, storage: str, partitions: int, group: str) -> Consumer:
    """A confluent-kafka consumer in a group of its own, assigned every partition from offset 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"{group}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(storage, p, OFFSET_BEGINNING) for p in range(partitions)])
    return consumer


def bench_raw(settings: Settings, storage: str, partitions: int, total: int) -> float:
    """A raw confluent-kafka poll loop over the storage topic: no processing, commit at the end."""
    consumer = _from_the_beginning(settings, storage, partitions, "bench-raw")
    clock = Clock(total)
    deadline = time.monotonic() + 300
    while not clock.done.is_set():
        if time.monotonic() > deadline:
            raise TimeoutError(f"raw poll loop saw {clock.seen:,} of {total:,} messages")
        batch = consumer.consume(1000, 0.5)
        n = sum(1 for m in batch if m.error() is None)
        if n:
            clock.tick(n)
    consumer.commit(asynchronous=False)
    consumer.close()
    return clock.rate


def bench_minimal(settings: Settings, storage: str, partitions: int, total: int) -> float:
    """The least work a per-message Python delivery does: the raw poll loop, plus, for each record,
    the message an endpoint gets (`SubscriptionMessage`) handed to an awaited no-op callable. No
    group state, no order, no commits."""
    consumer = _from_the_beginning(settings, storage, partitions, "bench-minimal")
    clock = Clock(total)

    async def sink(_m: SubscriptionMessage) -> None:
        clock.tick()

    async def loop() -> None:
        deadline = time.monotonic() + 300
        while not clock.done.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(f"minimal loop saw {clock.seen:,} of {total:,} messages")
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    key = (m.key() or b"").decode()
                    await sink(
                        SubscriptionMessage("bench", key, f"0-{m.partition()}-{m.offset()}", m.value(), 1)
                    )

    asyncio.run(loop())
    consumer.close()
    return clock.rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("messages", type=int, nargs="?", default=100_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    total = args.messages
    settings = get_settings()
    metadata = MetadataStore.of(settings)
    topic = f"bench-sub-{uuid.uuid4().hex[:8]}"
    storage = metadata.create(topic, PARTITIONS).storage_topics[0]
    with CompositeProducer(settings, topic, store=metadata) as producer:
        for i in range(total):
            producer.produce(f"g{i % GROUPS}", b"x" * 100)
    each: dict[str, list[float]] = {"raw": [], "minimal": [], "callable": [], "batch": [], "plain": []}
    for run in range(args.runs):
        each["raw"].append(bench_raw(settings, storage.name, storage.partitions, total))
        each["minimal"].append(bench_minimal(settings, storage.name, storage.partitions, total))
        each["callable"].append(asyncio.run(bench_subscription(settings, topic, total, "callable")))
        each["batch"].append(asyncio.run(bench_subscription(settings, topic, total, "batch")))
        each["plain"].append(asyncio.run(bench_plain_faust(settings, topic, total)))
        if args.runs > 1:
            print(
                f"run {run + 1}: raw {each['raw'][-1]:,.0f}, minimal {each['minimal'][-1]:,.0f}, "
                f"callable {each['callable'][-1]:,.0f}, "
                f"batch {each['batch'][-1]:,.0f}, plain Faust {each['plain'][-1]:,.0f} msg/s; "
                f"callable/raw {each['callable'][-1] / each['raw'][-1]:.2f}, "
                f"batch/raw {each['batch'][-1] / each['raw'][-1]:.2f}"
            )
    metadata.delete(topic)
    metadata.close()
    raw_rate = statistics.median(each["raw"])
    minimal_rate = statistics.median(each["minimal"])
    callable_rate = statistics.median(each["callable"])
    batch_rate = statistics.median(each["batch"])
    plain_rate = statistics.median(each["plain"])
    runs = f" (medians of {args.runs} runs)" if args.runs > 1 else ""
    print(f"messages: {total:,} of 100 B over {GROUPS} groups, {PARTITIONS} partitions{runs}")
    print(f"subscription, 1 shard, callable no-op sink: {callable_rate:,.0f} msg/s")
    print(f"subscription, 1 shard, batch no-op sink:    {batch_rate:,.0f} msg/s")
    print(f"plain Faust agent:                          {plain_rate:,.0f} msg/s")
    print(f"raw confluent-kafka poll loop:              {raw_rate:,.0f} msg/s")
    print(f"poll loop + message + awaited no-op:        {minimal_rate:,.0f} msg/s")
    print(
        f"ratio callable/plain: {callable_rate / plain_rate:.2f}, batch/plain: {batch_rate / plain_rate:.2f}"
        " (target >= 0.7)"
    )
    print(
        f"ratio callable/raw: {callable_rate / raw_rate:.2f}, batch/raw: {batch_rate / raw_rate:.2f}"
        " (target >= 0.35)"
    )
    print(
        f"ratio minimal/raw: {minimal_rate / raw_rate:.2f}, "
        f"callable/minimal: {callable_rate / minimal_rate:.2f}"
    )
    print(
        orjson.dumps(
            {
                "messages": total,
                "subscription_callable_msg_s": round(callable_rate),
                "subscription_batch_msg_s": round(batch_rate),
                "plain_faust_msg_s": round(plain_rate),
                "ratio_callable": round(callable_rate / plain_rate, 3),
                "ratio_batch": round(batch_rate / plain_rate, 3),
                "raw_msg_s": round(raw_rate),
                "ratio_raw": round(callable_rate / raw_rate, 3),
                "ratio_raw_batch": round(batch_rate / raw_rate, 3),
                "minimal_msg_s": round(minimal_rate),
                "ratio_minimal_raw": round(minimal_rate / raw_rate, 3),
                "ratio_callable_minimal": round(callable_rate / minimal_rate, 3),
                "runs": args.runs,
                "each_run_msg_s": {k: [round(r) for r in v] for k, v in each.items()},
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
