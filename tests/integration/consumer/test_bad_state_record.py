"""A key state record in `<name>-state` that does not decode (a position holding a null): the
copy taking the partition loads its other keys, keeps the key's previous state, and handles
every record. Before, loading the partition raised a TypeError out of the takeover."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from confluent_kafka import Producer

from app.consumer import ConsumerSettings, KeyedConsumer, Message
from app.ordered.rules import GroupState
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, fill, parse, wait_until

pytestmark = pytest.mark.integration

KEYS, PER_KEY, PARTITIONS = 50, 4, 2


async def test_a_copy_takes_over_past_a_state_record_that_does_not_decode(
    kafka: Settings, unique: str
) -> None:
    name = f"badstate-{unique}"
    total = fill(kafka.bootstrap, name, PARTITIONS, KEYS, PER_KEY)
    settings = ConsumerSettings(name=name, topic=name, bootstrap=kafka.bootstrap)
    handled: list[tuple[str, int]] = []

    async def handle(message: Message) -> None:
        handled.append(parse(message.value))

    first = KeyedConsumer(settings, handle)
    task = asyncio.create_task(first.run())
    try:
        await wait_until(
            lambda: sorted(first.heartbeat().partitions) == list(range(PARTITIONS)) or task.done(),
            60,
            "the first copy owning every partition",
        )
    finally:
        first.stop()
        await task
    bad = GroupState().to_json() | {"rq": {"p": [0, 3, 0, None], "c": None}}
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key in ("k1", "k2"):  # whichever partition the source's partitioner put them in
        for p in range(PARTITIONS):
            producer.produce(f"{name}-state", key=key.encode(), value=orjson.dumps({"s": bad}), partition=p)
    assert producer.flush(30) == 0

    second = KeyedConsumer(settings, handle)
    task = asyncio.create_task(second.run())
    try:
        await wait_until(lambda: len(set(handled)) >= total or task.done(), 90, "every record handled")
    finally:
        second.stop()
        await task
    check_outcome(handled, {}, KEYS, PER_KEY)
