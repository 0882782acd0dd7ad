"""A key's long backoff holds no other key, on the real broker: key `slow` fails four times (its
fourth copy waits 8 s in `<name>-retry`), then key `fast` fails once behind it in the same retry
partition (its copy is due after 1 s). `fast` must be handled before `slow`. Before, a copy
admitted retry copies only from the head of the partition: `fast` waited for `slow`'s backoff."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from confluent_kafka import Producer

from app.consumer import ConsumerSettings, KeyedConsumer, Message, RetriableError, RetryPolicy
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.settings import Settings
from tests.integration.consumer.helpers import wait_until

pytestmark = pytest.mark.integration
FAILURES = {"slow": 4, "fast": 1}  # attempts that fail, per key


def produce(bootstrap: str, topic: str, key: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=key.encode(), value=f"{key}:0".encode())
    assert producer.flush(30) == 0


async def test_a_due_retry_is_not_held_behind_another_keys_backoff(kafka: Settings, unique: str) -> None:
    topic = f"hol-{unique}"
    await asyncio.to_thread(KafkaAdmin(kafka.bootstrap).ensure, [TopicSpec(topic, 1)])
    attempts: Counter[str] = Counter()
    handled: list[str] = []

    async def handle(message: Message) -> None:
        attempts[message.ordering_key] += 1
        if attempts[message.ordering_key] <= FAILURES[message.ordering_key]:
            raise RetriableError("not yet")
        handled.append(message.ordering_key)

    settings = ConsumerSettings(
        name=f"hol-{unique}",
        topic=topic,
        bootstrap=kafka.bootstrap,
        retry=RetryPolicy(max_attempts=6, min_backoff_s=1.0, max_backoff_s=60.0),
    )
    consumer = KeyedConsumer(settings, handle)
    task = asyncio.create_task(consumer.run())
    try:
        await asyncio.to_thread(produce, kafka.bootstrap, topic, "slow")
        await wait_until(lambda: attempts["slow"] == 4, 60, "slow's fourth failure (its copy waits 8 s)")
        await asyncio.to_thread(produce, kafka.bootstrap, topic, "fast")
        await wait_until(lambda: len(handled) == 2, 60, "both keys handled")
    finally:
        consumer.stop()
        await task
    assert handled == ["fast", "slow"], "fast's retry came due first and ran first"
    assert attempts == {"slow": 5, "fast": 2}
