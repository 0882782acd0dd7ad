"""A composite topic as the library's source, on the real broker: two copies read storage topic
`<name>.0`, the produce pointer switches to `<name>.1`, and the copies move on only once the
group committed `<name>.0` to its end; every record is handled once and, per key, in produce
order across the switch (some keys' last record of `<name>.0` is retried while their records
in `<name>.1` arrive, and those wait behind it)."""

from __future__ import annotations

import asyncio

import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.consumer import ConsumerSettings, KeyedConsumer, Message, RetriableError, RetryPolicy
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, parse, wait_until

pytestmark = pytest.mark.integration

KEYS, PARTITIONS = 200, 4
BEFORE, AFTER = 3, 3  # records per key written before and after the switch


def flaky(key: str, seq: int) -> bool:
    """Fails on its first attempt: the key's last record before the switch, for every 7th key."""
    return int(key[1:]) % 7 == 0 and seq == BEFORE - 1


def produce(settings: Settings, name: str, seqs: range) -> set[str]:
    """Keyed records `key:seq` through the routed producer; the storage topics they went to."""
    topics: set[str] = set()
    producer = CompositeProducer(settings, name)  # its own metadata reader, re-read at every call
    try:
        for seq in seqs:
            for k in range(KEYS):
                topic, _ = producer.produce(f"k{k}", f"k{k}:{seq}".encode())
                topics.add(topic)
    finally:
        producer.close()
    return topics


async def test_two_copies_follow_a_switch_in_key_order(kafka: Settings, unique: str) -> None:
    name = f"cmp-{unique}"
    settings = kafka.model_copy(update={"metadata_topic": f"meta-{unique}", "metadata_refresh_s": 0.0})
    store = MetadataStore.of(settings)
    try:
        await asyncio.to_thread(store.create, name, PARTITIONS)
        await asyncio.to_thread(store.add_storage_topic, name, PARTITIONS)
    finally:
        await asyncio.to_thread(store.close)

    handled: list[tuple[str, int]] = []
    topics_seen: dict[tuple[str, int], str] = {}

    async def handle(message: Message) -> None:
        key, seq = parse(message.value)
        if flaky(key, seq) and message.attempt == 1:
            raise RetriableError("later")
        handled.append((key, seq))
        topics_seen[(key, seq)] = message.topic

    consumer_settings = ConsumerSettings(
        name=name,
        composite_topic=name,
        metadata_topic=settings.metadata_topic,
        bootstrap=settings.bootstrap,
        concurrency=16,
        retry=RetryPolicy(max_attempts=3, min_backoff_s=1.0, max_backoff_s=1.0),
        heartbeat_s=0.5,
        switch_grace_s=0.5,
    )
    copies = [KeyedConsumer(consumer_settings, handle, member_id=f"copy-{i}") for i in range(2)]
    tasks = [asyncio.create_task(c.run()) for c in copies]
    try:
        await wait_until(
            lambda: sorted(p for c in copies for p in c.heartbeat().partitions) == list(range(PARTITIONS)),
            60,
            "two copies sharing every lane partition",
        )
        assert await asyncio.to_thread(produce, settings, name, range(BEFORE)) == {f"{name}.0"}
        await wait_until(lambda: len(handled) >= KEYS, 60, "records of the first storage topic handled")
        store = MetadataStore.of(settings)
        try:
            await asyncio.to_thread(store.switch_produce, name)
        finally:
            await asyncio.to_thread(store.close)
        assert await asyncio.to_thread(produce, settings, name, range(BEFORE, BEFORE + AFTER)) == {
            f"{name}.1"
        }
        total = KEYS * (BEFORE + AFTER)
        await wait_until(lambda: len(set(handled)) >= total, 120, "every record handled")
        await wait_until(lambda: all(c.read_idx == 1 for c in copies), 30, "both copies at storage 1")
    finally:
        for c in copies:
            c.stop()
        await asyncio.gather(*tasks)

    duplicates = check_outcome(handled, {}, KEYS, BEFORE + AFTER)
    assert duplicates == 0, "clean copies drain and commit: nothing is redelivered"
    assert all(topic == f"{name}.{0 if seq < BEFORE else 1}" for (_, seq), topic in topics_seen.items()), (
        "Message.topic is the storage topic the record was read from"
    )
    retried = sum(c.stats.retrying for c in copies)
    assert retried == len([k for k in range(KEYS) if flaky(f"k{k}", BEFORE - 1)])
    print(
        f"\n{total} records, {KEYS} keys over a switch: retried {retried}, "
        f"sidelined {sum(c.stats.sidelined for c in copies)}"
    )


async def test_a_topic_naming_a_composite_topic_reads_its_storage_topics(
    kafka: Settings, unique: str
) -> None:
    """`topic=` (the CLI's `--topic`) may name a composite topic: no Kafka topic has its name, its
    storage topics are `<name>.0`, …. Before, the copy stopped at once: topic does not exist."""
    name = f"cmp-named-{unique}"
    settings = kafka.model_copy(update={"metadata_topic": f"meta-{unique}"})
    store = MetadataStore.of(settings)
    try:
        await asyncio.to_thread(store.create, name, PARTITIONS)
    finally:
        await asyncio.to_thread(store.close)
    assert await asyncio.to_thread(produce, settings, name, range(BEFORE)) == {f"{name}.0"}

    handled: list[tuple[str, int]] = []

    async def handle(message: Message) -> None:
        handled.append(parse(message.value))

    consumer = KeyedConsumer(
        ConsumerSettings(
            name=name, topic=name, metadata_topic=settings.metadata_topic, bootstrap=settings.bootstrap
        ),
        handle,
    )
    task = asyncio.create_task(consumer.run())
    try:
        await wait_until(lambda: len(handled) >= KEYS * BEFORE or task.done(), 60, "every record handled")
    finally:
        consumer.stop()
        await task
    assert consumer.settings.composite_topic == name
    assert check_outcome(handled, {}, KEYS, BEFORE) == 0
