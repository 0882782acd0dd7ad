""" "What is the state of key K", asked from outside the copies (`inspect.ask_owner`, in a thread)
on the real broker: two copies over a 4-partition topic; one key's handler blocks, another's
fails and waits for its retry. The copy owning each key's partition answers (the record running,
the records waiting, the retry state); when that copy stops, the copy taking the partition
answers; with no copy live, or none answering, the changelog does, and the answer says so."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
import zlib
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, Producer
from confluent_kafka import Message as KafkaMessage

from app.cli.consumer import consumer as consumer_cli
from app.consumer import ConsumerSettings, KeyedConsumer, Member, Message, RetriableError, RetryPolicy
from app.consumer.inspect import ask_owner, key_state
from app.consumer.owner import CRC32, KeyAnswer
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import broker_for
from app.settings import Settings
from tests.integration.consumer.helpers import wait_until
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 4


def key_in(partition: int, prefix: str) -> str:
    """A key librdkafka's default partitioner puts in `partition` (checked against the broker below)."""
    return next(
        key
        for key in (f"{prefix}-{i}" for i in itertools.count())
        if zlib.crc32(key.encode()) % PARTITIONS == partition
    )


def produce(bootstrap: str, topic: str, keys: list[str]) -> list[tuple[str, int, int]]:
    """One record per key, in order, with the default partitioner; (key, partition, offset) each."""
    placed: list[tuple[str, int, int]] = []

    def delivered(err: KafkaError | None, msg: KafkaMessage) -> None:
        assert err is None, err
        placed.append(((msg.key() or b"").decode(), msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"v", on_delivery=delivered)
        producer.flush(10)  # one at a time: the offsets are the order of `keys`
    assert len(placed) == len(keys)
    return placed


async def cli(*args: str) -> Any:
    """`hubstream consumer ARGS`, its printed JSON."""
    result = await asyncio.to_thread(CliRunner().invoke, consumer_cli, list(args))
    assert result.exit_code == 0, result.output
    return orjson.loads(result.output)


def heartbeat_nobody_answers(bootstrap: str, name: str) -> None:
    """A live heartbeat of a copy that reads no requests (as a copy killed a moment ago leaves)."""
    now = int(time.time() * 1000)
    member = Member("ghost", socket.gethostname(), os.getpid(), now, now, 60.0, [0, 1, 2, 3], key_route=CRC32)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(f"{name}-members", key=b"ghost", value=member.encode())
    assert producer.flush(10) == 0


async def test_the_owning_copy_answers_then_the_changelog(kafka: Settings, unique: str) -> None:
    bootstrap = kafka.bootstrap
    topic = name = f"ks-{unique}"
    KafkaAdmin(bootstrap).ensure([TopicSpec(topic, PARTITIONS)])
    stuck, flaky = key_in(0, "stuck"), key_in(3, "flaky")
    release = asyncio.Event()
    handled: list[tuple[str, int]] = []

    async def handle(message: Message) -> None:
        if message.ordering_key == flaky:
            raise RetriableError("the downstream is not ready")
        if message.ordering_key == stuck:
            await release.wait()
        handled.append((message.ordering_key, message.offset))

    settings = ConsumerSettings(
        name=name,
        topic=topic,
        bootstrap=bootstrap,
        concurrency=8,
        retry=RetryPolicy(max_attempts=10, min_backoff_s=120, max_backoff_s=120),  # not due in the test
        heartbeat_s=0.5,
    )
    copies = [KeyedConsumer(settings, handle, member_id=f"ks-{unique}-{i}") for i in range(2)]
    tasks = {c.member_id: asyncio.create_task(c.run()) for c in copies}

    def owner(partition: int) -> KeyedConsumer:
        return next(c for c in copies if partition in c.heartbeat().partitions)

    def shared() -> bool:
        owned = [c.heartbeat().partitions for c in copies]
        return all(owned) and sorted(p for ps in owned for p in ps) == list(range(PARTITIONS))

    async def asked(key: str, timeout_s: float = 5.0) -> KeyAnswer:
        return await asyncio.to_thread(ask_owner, broker_for(kafka), name, key, timeout_s)

    try:
        await wait_until(shared, 60, "two copies sharing the four partitions")
        placed = await asyncio.to_thread(produce, bootstrap, topic, [stuck, flaky, stuck, flaky, stuck])
        assert {(k, p) for k, p, _ in placed} == {(stuck, 0), (flaky, 3)}, "keys where crc32 puts them"
        stuck_offsets = [o for k, _, o in placed if k == stuck]
        flaky_offsets = [o for k, _, o in placed if k == flaky]
        owner_0, owner_3 = owner(0), owner(3)
        assert owner_0 is not owner_3  # range assignment: [0, 1] and [2, 3]

        async def stuck_running() -> KeyAnswer | None:
            got = await asked(stuck)
            return got if got.source == "owner" and got.partitions[0].waiting == 2 else None

        got = await async_wait_until(stuck_running, 30, "the owner: stuck's first record running")
        assert got is not None
        answer = got.partitions[0]
        assert got.asked == (0,) and answer.member == owner_0.member_id and answer.partition == 0
        assert answer.in_flight is not None
        assert (answer.in_flight.offset, answer.in_flight.attempt) == (stuck_offsets[0], 1)
        assert (answer.lane_busy, answer.state, answer.state_from) == (True, None, "memory")
        shown = await cli("state", name, stuck)
        assert shown["source"] == "owner" and shown["partitions"]["0"]["member"] == owner_0.member_id
        assert shown["partitions"]["0"]["in_flight"]["offset"] == stuck_offsets[0]

        async def flaky_waiting() -> KeyAnswer | None:
            got = await asked(flaky)
            return got if got.source == "owner" and got.partitions[3].retry_waiting == 2 else None

        got = await async_wait_until(flaky_waiting, 30, "the owner: flaky's retry and sidelined copies")
        assert got is not None
        answer = got.partitions[3]
        assert answer.member == owner_3.member_id and answer.in_flight is None and not answer.lane_busy
        assert answer.state is not None and answer.state["retry_head"] == [0, flaky_offsets[0]]
        assert answer.next_retry_due_ms is not None and answer.next_retry_due_ms > time.time() * 1000 + 60_000
        logged = await asyncio.to_thread(key_state, broker_for(kafka), name, flaky)
        assert logged[3]["s"] == answer.state, "the owner's state in memory is the one it wrote"
        flaky_state = answer.state

        # The stuck key goes on; flaky's owner stops and the other copy takes partition 3.
        release.set()
        await wait_until(lambda: [o for k, o in handled if k == stuck] == stuck_offsets, 30, "stuck done")
        owner_3.stop()
        await tasks.pop(owner_3.member_id)
        (survivor,) = [c for c in copies if c is not owner_3]
        await wait_until(lambda: survivor.heartbeat().partitions == [0, 1, 2, 3], 60, "one copy owning all")

        async def answered_by_survivor() -> KeyAnswer | None:
            got = await asked(flaky)
            ok = got.source == "owner" and got.partitions[3].member == survivor.member_id
            return got if ok and got.partitions[3].retry_waiting == 2 else None

        got = await async_wait_until(answered_by_survivor, 30, "the new owner answering for partition 3")
        assert got is not None
        assert got.partitions[3].state == flaky_state and got.partitions[3].state_from == "memory"
        got = await asked(stuck)
        assert got.source == "owner" and got.partitions[0].member == survivor.member_id
        assert not got.partitions[0].lane_busy and got.partitions[0].in_flight is None

        # No copy live: the changelog answers at once.
        survivor.stop()
        await tasks.pop(survivor.member_id)
        got = await asked(flaky)
        assert got.source == "changelog" and "no live copy" in got.note
        assert {p: a.state for p, a in got.partitions.items()} == {3: flaky_state}
        assert (await asked(stuck)).partitions == {}  # it never failed: no state
        shown = await cli("state", name, flaky)
        assert shown["source"] == "changelog" and shown["partitions"]["3"]["state"] == flaky_state
        assert (await cli("state", name, flaky, "--from-changelog"))["3"]["s"] == flaky_state

        # A copy looks live but answers nothing: the asker waits out its timeout, then the changelog.
        await asyncio.to_thread(heartbeat_nobody_answers, bootstrap, name)
        started = time.monotonic()
        got = await asked(flaky, timeout_s=1.0)
        assert got.source == "changelog" and "within 1 s" in got.note and time.monotonic() - started >= 1.0
        assert got.asked == (3,) and got.partitions[3].state == flaky_state
    finally:
        release.set()
        for c in copies:
            c.stop()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
