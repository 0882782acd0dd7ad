"""Copies of one library consumer on the real broker: scaling 1 -> 3 -> 1 while keys fail
transiently and permanently, the global in-flight limit, and the error-rate throttle."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer

from app.consumer import (
    ConsumerSettings,
    KeyedConsumer,
    Member,
    Message,
    OnDlq,
    PermanentError,
    RetriableError,
    RetryPolicy,
    ThrottlePolicy,
)
from app.consumer.inspect import key_state, members
from app.kafka.broker import broker_for
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, dead_lettered, fill, parse, wait_until
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration

KEYS, PER_KEY, PARTITIONS = 2_000, 3, 8


def transient(key: str) -> bool:
    return int(key[1:]) % 41 == 0


def permanent(key: str, seq: int) -> bool:
    return int(key[1:]) % 97 == 5 and seq == 1


async def test_three_copies_scale_and_keep_key_order(kafka: Settings, unique: str) -> None:
    topic, name = f"lib-{unique}", f"lib-{unique}"
    total = fill(kafka.bootstrap, topic, PARTITIONS, KEYS, PER_KEY)
    handled: list[tuple[str, int]] = []
    in_flight = 0
    max_in_flight = 0
    limit = 24

    async def handle(message: Message) -> None:
        nonlocal in_flight, max_in_flight
        key, seq = parse(message.value)
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
        try:
            await asyncio.sleep(0.002)
            if transient(key) and message.attempt == 1:
                raise RetriableError("try later")
            if permanent(key, seq):
                raise PermanentError("never")
            handled.append((key, seq))
        finally:
            in_flight -= 1

    settings = ConsumerSettings(
        name=name,
        topic=topic,
        bootstrap=kafka.bootstrap,
        concurrency=16,
        global_in_flight=limit,
        retry=RetryPolicy(max_attempts=3, min_backoff_s=0.2, max_backoff_s=1.0),
        on_dlq=OnDlq.BLOCK_GROUP,
        heartbeat_s=0.5,
    )
    copies = [KeyedConsumer(settings, handle, member_id=f"copy-{i}") for i in range(3)]
    tasks = [asyncio.create_task(copies[0].run())]
    await wait_until(lambda: len(handled) >= total // 4, 120, "a quarter handled by one copy")
    tasks += [asyncio.create_task(c.run()) for c in copies[1:]]
    await wait_until(lambda: all(c.heartbeat().partitions for c in copies), 60, "three copies sharing")
    listed: list[Member] = []

    async def listing_covers_all() -> bool:
        listed[:] = await asyncio.to_thread(members, broker_for(kafka), name)
        return sorted(p for m in listed for p in m.partitions) == list(range(PARTITIONS))

    await async_wait_until(listing_covers_all, 30, "members listing every partition once")
    await wait_until(lambda: len(handled) >= total // 2, 120, "half handled")
    for c in copies[1:]:
        c.stop()
    await asyncio.gather(*tasks[1:])
    await wait_until(lambda: len(copies[0].heartbeat().partitions) == PARTITIONS, 60, "one copy again")
    dead_keys = {f"k{k}" for k in range(KEYS) if permanent(f"k{k}", 1)}
    expected_dead = len(dead_keys) * (PER_KEY - 1)  # the failed message and the ones after it

    def done() -> bool:
        return len({h for h in handled}) + sum(c.stats.dead_lettered for c in copies) >= total

    await wait_until(done, 120, "every record handled or dead-lettered")
    copies[0].stop()
    await tasks[0]

    dead = await asyncio.to_thread(dead_lettered, broker_for(kafka), name)
    duplicates = check_outcome(handled, dead, KEYS, PER_KEY)
    assert set(dead) == dead_keys and sum(len(v) for v in dead.values()) == expected_dead
    assert duplicates == 0, "clean stops drain and commit: nothing is redelivered"
    assert max_in_flight <= limit
    assert sum(c.stats.retrying for c in copies) >= len([k for k in range(KEYS) if transient(f"k{k}")])
    assert {m.member for m in listed} >= {"copy-0", "copy-1", "copy-2"}
    blocked = next(iter(sorted(dead_keys)))
    state = await asyncio.to_thread(key_state, broker_for(kafka), name, blocked)
    assert state and all(s["s"]["dlq"]["p"] is not None for s in state.values())
    print(
        f"\n{total} records, {KEYS} keys, 1->3->1 copies: max in flight {max_in_flight} (limit {limit}), "
        f"dead-lettered {expected_dead}, duplicates {duplicates}, "
        f"retries {sum(c.stats.retrying for c in copies)}, sidelined {sum(c.stats.sidelined for c in copies)}"
    )


async def test_the_throttle_slows_every_copy_while_the_failure_rate_is_high(
    kafka: Settings, unique: str
) -> None:
    topic, name = f"thr-{unique}", f"thr-{unique}"
    fill(kafka.bootstrap, topic, 4, 400, 1)  # warm-up keys
    failing = {"on": False}
    calls: list[tuple[float, bool]] = []

    async def handle(message: Message) -> None:
        calls.append((time.monotonic(), failing["on"]))
        await asyncio.sleep(0.002)
        if failing["on"]:
            raise PermanentError("the downstream is down")

    settings = ConsumerSettings(
        name=name,
        topic=topic,
        bootstrap=kafka.bootstrap,
        concurrency=8,
        retry=RetryPolicy(max_attempts=1),
        on_dlq=OnDlq.SKIP_FAILED,
        heartbeat_s=0.3,
        throttle=ThrottlePolicy(error_rate=0.5, window_s=2.0, min_attempts=20, throttled_per_s=40.0),
    )
    copies = [KeyedConsumer(settings, handle, member_id=f"t-{i}") for i in range(2)]
    tasks = [asyncio.create_task(c.run()) for c in copies]
    await wait_until(lambda: len(calls) >= 400, 60, "warm-up handled")
    await wait_until(lambda: all(c.heartbeat().partitions for c in copies), 60, "both copies own partitions")

    def rate(start: float, end: float) -> float:
        """Calls per second over the span of the calls made between start and end."""
        times = [at for at, _ in calls if start <= at < end]
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0

    # before: a healthy stream
    t0 = time.monotonic()
    await asyncio.to_thread(fill, kafka.bootstrap, topic, 4, 2_000, 1)
    await wait_until(lambda: len(calls) >= 2_400, 60, "healthy traffic")
    before = rate(t0, time.monotonic())
    # during: every call fails
    failing["on"] = True
    await asyncio.to_thread(fill, kafka.bootstrap, topic, 4, 3_000, 1)
    await wait_until(lambda: all(c.heartbeat().throttled for c in copies), 30, "both copies throttled")
    t1 = time.monotonic()
    await wait_until(lambda: time.monotonic() - t1 >= 3.0, 10, "three seconds of throttled delivery")
    during = rate(t1, time.monotonic())
    # after: healthy again
    failing["on"] = False
    await wait_until(lambda: not any(c.heartbeat().throttled for c in copies), 30, "throttle lifted")
    t2 = time.monotonic()
    handled_before = len(calls)
    await asyncio.to_thread(fill, kafka.bootstrap, topic, 4, 2_000, 1)
    await wait_until(lambda: len(calls) >= handled_before + 2_000, 60, "recovered traffic")
    after = rate(t2, time.monotonic())
    for c in copies:
        c.stop()
    await asyncio.gather(*tasks)
    print(
        f"\ndelivery attempts/s across 2 copies: before {before:.0f}, during {during:.0f}, after {after:.0f}"
    )
    assert during <= 40 * 1.5, "throttled copies together stay near throttled_per_s"
    assert before > 3 * during and after > 3 * during


async def test_retry_copies_waiting_do_not_hold_back_the_topic(kafka: Settings, unique: str) -> None:
    """200 keys fail once and wait 300 s for their retry, 600 copies in the retry topic (their later
    messages sidelined behind them). A copy started then, with a read-ahead of 50, still handles
    the new records of other keys at once: waiting copies do not fill its buffer."""
    topic, name = f"rw-{unique}", f"rw-{unique}"
    total = fill(kafka.bootstrap, topic, 4, 1_000, 3)
    failing = {f"k{k}" for k in range(0, 1_000, 5)}
    done: set[tuple[str, int]] = set()

    async def handle(message: Message) -> None:
        key, seq = parse(message.value)
        if key in failing and seq == 0 and message.attempt == 1:
            raise RetriableError("later")
        done.add((key, seq))

    settings = ConsumerSettings(
        name=name,
        topic=topic,
        bootstrap=kafka.bootstrap,
        buffered=50,
        # far beyond the test's length on any machine: no waiting copy comes due during it
        retry=RetryPolicy(max_attempts=3, min_backoff_s=300.0, max_backoff_s=300.0),
    )
    first = KeyedConsumer(settings, handle)
    task = asyncio.create_task(first.run())
    await wait_until(lambda: len(done) >= total - 3 * len(failing), 30, "the keys that did not fail")
    await wait_until(lambda: first.stats.retrying + first.stats.sidelined == 3 * len(failing), 30, "copies")
    first.stop()
    await task

    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(3_000):
        producer.produce(topic, key=f"n{i}".encode(), value=f"n{i}:0".encode())
    assert producer.flush(30) == 0
    second = KeyedConsumer(settings, handle)
    task = asyncio.create_task(second.run())
    started = time.monotonic()
    await wait_until(lambda: sum(1 for key, _ in done if key.startswith("n")) == 3_000, 40, "the new records")
    waited = time.monotonic() - started
    second.stop()
    await task
    assert waited < 30, f"new records waited {waited:.0f} s behind retry copies"
    assert second.stats.delivered == 3_000  # none of the waiting copies was due yet
