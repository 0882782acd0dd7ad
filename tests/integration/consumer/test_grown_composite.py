"""A composite topic that grew to more partitions, as the library's source on the real broker.

As README shows it: `topic create orders -p 4`, `topic add-storage orders -p 8` (K = 2),
`topic switch orders`, and copies run with `hubstream consumer run … --topic orders`. Before,
the copies held at the end of `orders.0` for ever (`orders.1 routes keys unlike orders.0`) and
handled nothing produced after the switch.

Three copies share four lanes (2 + 1 + 1 by Kafka's range assignment); the eight partitions of
`orders.1` follow their lanes (4 + 2 + 2), where range assignment of `orders.1` itself would
give 3 + 3 + 2 and split lane 1's partitions 2 and 3 between two copies. Every record is handled
or dead-lettered, per key in produce order across the switch, nothing twice."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.consumer import ConsumerSettings, KeyedConsumer, Message
from app.consumer.inspect import dead_letters
from app.kafka.broker import broker_for
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, dead_lettered, parse, wait_until
from tests.integration.consumer.processes import ROOT, Copies

pytestmark = pytest.mark.integration

KEYS, BEFORE, AFTER = 300, 2, 3  # records per key produced before and after the switch


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"hubstream {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout


def produce(settings: Settings, name: str, seqs: range) -> set[str]:
    """Records `k<n>:<seq>` keyed `k<n>` through the routed producer; the storage topics used."""
    topics: set[str] = set()
    with CompositeProducer(settings, name) as producer:
        for seq in seqs:
            for k in range(KEYS):
                topics.add(producer.produce(f"k{k}", f"k{k}:{seq}".encode())[0])
    return topics


def lanes_of(copies: Copies, label: str) -> bool:
    return "owns partitions" in copies.log_tail(label, 1_000_000)


async def test_copies_follow_a_storage_topic_with_twice_the_partitions(
    kafka: Settings, unique: str, tmp_path: Path
) -> None:
    name = f"grown-{unique}"
    env = {"KAFKA_BOOTSTRAP": kafka.bootstrap, "COMPOSITE_METADATA_TOPIC": f"meta-{unique}"}
    settings = kafka.model_copy(update={"metadata_topic": env["COMPOSITE_METADATA_TOPIC"]})
    cli(env, "topic", "create", name, "--partitions", "4")
    cli(env, "topic", "add-storage", name, "--partitions", "8")
    copies = Copies(tmp_path, kafka.bootstrap, name, name)
    try:
        for label in ("a", "b", "c"):
            copies.start(  # the grace after a switch: two refreshes of a second and a second
                label,
                "--concurrency",
                "16",
                COMPOSITE_METADATA_TOPIC=env["COMPOSITE_METADATA_TOPIC"],
                COMPOSITE_METADATA_REFRESH_S="1",
            )
        await wait_until(
            lambda: all(lanes_of(copies, label) for label in ("a", "b", "c")),
            120,
            "three copies owning lanes",
        )
        assert await asyncio.to_thread(produce, settings, name, range(BEFORE)) == {f"{name}.0"}
        await wait_until(lambda: len(set(copies.handled())) >= KEYS * BEFORE * 0.9, 120, "orders.0 handled")
        cli(env, "topic", "switch", name)
        after = await asyncio.to_thread(produce, settings, name, range(BEFORE, BEFORE + AFTER))
        assert after == {f"{name}.1"}
        broker = broker_for(settings)
        total = KEYS * (BEFORE + AFTER)

        def outcome_ready() -> bool:
            dead = sum(len(v) for v in dead_lettered(broker, name).values())
            return len(set(copies.handled())) + dead >= total

        await wait_until(outcome_ready, 180, "every record handled or dead-lettered")
        logs = {label: copies.log_tail(label, 1_000_000) for label in ("a", "b", "c")}
        for label in ("a", "b", "c"):
            assert copies.stop(label) == 0, logs[label][-3000:]
    finally:
        for label in list(copies.procs):
            copies.kill9(label)
    duplicates = check_outcome(copies.handled(), dead_lettered(broker, name), KEYS, BEFORE + AFTER)
    assert duplicates == 0, "no copy came or went while the records flowed: nothing is redelivered"
    assert not any("stays at the end of" in text for text in logs.values())
    read = [text for text in logs.values() if f"{name}.1" in text and "reads [" in text]
    assert len(read) == 3, "each copy reads the partitions of orders.1 that hold its lanes' keys"


async def test_a_record_off_its_keys_partition_is_dead_lettered_with_the_reason(
    kafka: Settings, unique: str
) -> None:
    """A record written into a scaled storage topic past the router (a producer of its own) is
    not where its key's other records are: its lane cannot order it with them. It goes to the DLQ
    with the reason; the key's routed records are handled as usual."""
    name = f"offroute-{unique}"
    settings = kafka.model_copy(update={"metadata_topic": f"meta-{unique}"})
    store = MetadataStore.of(settings)
    try:
        await asyncio.to_thread(store.create, name, 4)
        await asyncio.to_thread(store.add_storage_topic, name, 8)
        await asyncio.to_thread(store.switch_produce, name)
    finally:
        await asyncio.to_thread(store.close)
    routed = await asyncio.to_thread(produce, settings, name, range(2))
    assert routed == {f"{name}.1"}
    with CompositeProducer(settings, name) as producer:
        _, partition = producer.produce("k7", b"k7:2")
    wrong = partition ^ 1  # the other partition of the same lane
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    raw.produce(f"{name}.1", key=b"k7", value=b"k7:3", partition=wrong)
    assert raw.flush(30) == 0

    handled: list[tuple[str, int]] = []
    where: dict[tuple[str, int], tuple[str, int]] = {}

    async def handle(message: Message) -> None:
        handled.append(parse(message.value))
        where[parse(message.value)] = (message.topic, message.partition)

    consumer = KeyedConsumer(
        ConsumerSettings(
            name=name, topic=name, metadata_topic=settings.metadata_topic, bootstrap=settings.bootstrap
        ),
        handle,
    )
    task = asyncio.create_task(consumer.run())
    broker = broker_for(settings)
    try:
        await wait_until(
            lambda: len(handled) >= KEYS * 2 + 1 or task.done(), 90, "the routed records handled"
        )
        await wait_until(lambda: bool(dead_letters(broker, name)), 30, "the off-route record dead-lettered")
    finally:
        consumer.stop()
        await task
    assert check_outcome(handled, {}, KEYS, 2) == 0
    assert ("k7", 2) in handled and ("k7", 3) not in handled
    [dead] = dead_letters(broker, name)
    assert (dead["value"], dead["reason"]) == ("k7:3", "undecodable")
    assert f"[{wrong}]" in dead["error"] and "router" in dead["error"]
    assert where[("k7", 2)] == (f"{name}.1", partition), "Message.partition is the record's own"
