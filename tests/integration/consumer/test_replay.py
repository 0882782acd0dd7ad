"""Replaying a library consumer's dead letters on the real broker: refused while a copy runs; once
every copy stopped, the selected keys' dead letters reach the handler again, in key order, before
the key's later messages; a replay that fails again goes back to DLQ once (replay-failed)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from app.consumer import ConsumerSettings, KeyedConsumer, Message, OnDlq, PermanentError, RetryPolicy
from app.consumer.inspect import members
from app.consumer.replay import ConsumerRunning, replay_dead_letters
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription.replay import ReplaySelection
from tests.integration.consumer.helpers import dead_lettered, fill, parse, wait_until

pytestmark = pytest.mark.integration

KEYS, PER_KEY, PARTITIONS = 200, 4, 4


def blocked(key: str) -> bool:
    return int(key[1:]) % 17 == 3  # seq 1 fails for good: seqs 2 and 3 follow it to DLQ


def fails_again(key: str) -> bool:
    return int(key[1:]) % 34 == 3  # half of the blocked keys fail their replay too


async def test_dead_letters_replayed_in_key_order(kafka: Settings, unique: str) -> None:
    topic, name, bootstrap = f"rpl-{unique}", f"rpl-{unique}", kafka.bootstrap
    total = fill(bootstrap, topic, PARTITIONS, KEYS, PER_KEY)
    keys = [f"k{k}" for k in range(KEYS)]
    blocked_keys = [k for k in keys if blocked(k)]
    handled: list[tuple[str, int]] = []
    replaying = False

    async def handle(message: Message) -> None:
        key, seq = parse(message.value)
        if blocked(key) and seq == 1 and (not replaying or fails_again(key)):
            raise PermanentError("not now")
        handled.append((key, seq))

    settings = ConsumerSettings(
        name=name,
        topic=topic,
        bootstrap=bootstrap,
        retry=RetryPolicy(max_attempts=1),
        on_dlq=OnDlq.BLOCK_GROUP,
        heartbeat_s=1.0,
    )
    first = KeyedConsumer(settings, handle, member_id="first")
    running = asyncio.create_task(first.run())
    expected_dead = 3 * len(blocked_keys)
    await wait_until(
        lambda: (
            len(handled) == total - expected_dead
            and sum(len(v) for v in dead_lettered(broker_for(kafka), name).values()) == expected_dead
        ),
        120,
        "every record handled or dead-lettered",
    )
    # The DLQ reads above run on the event loop and can hold the copy's heartbeats past their
    # liveness (3 x 1 s, wide enough for a loaded machine): the refusal is checked once the copy
    # is seen alive again.
    await wait_until(lambda: bool(members(broker_for(kafka), name)), 30, "the first copy's heartbeat")
    with pytest.raises(ConsumerRunning):
        await asyncio.to_thread(replay_dead_letters, broker_for(kafka), name, ReplaySelection())
    first.stop()
    await running

    one = blocked_keys[1]
    assert not fails_again(one)
    report = await asyncio.to_thread(
        replay_dead_letters, broker_for(kafka), name, ReplaySelection(group_id=one)
    )
    assert report["replayed"] == 3 and [k.split("@")[0] for k in report["keys"]] == [one]
    report = await asyncio.to_thread(replay_dead_letters, broker_for(kafka), name, ReplaySelection())
    assert report["replayed"] == expected_dead - 3  # the first key's letters are resolved already

    producer = Producer({"bootstrap.servers": bootstrap})
    for key in blocked_keys:  # a later message of each blocked key, after the replays
        producer.produce(topic, key=key.encode(), value=f"{key}:{PER_KEY}".encode())
    assert producer.flush(30) == 0
    replaying, before = True, len(handled)
    second = KeyedConsumer(settings, handle, member_id="second")
    running = asyncio.create_task(second.run())
    recovered = [k for k in blocked_keys if not fails_again(k)]
    again = [k for k in blocked_keys if fails_again(k)]
    await wait_until(
        lambda: (
            sum(1 for key, _ in handled[before:] if key in recovered) == 4 * len(recovered)
            and all(
                sum(1 for seq, reason in dead_lettered(broker_for(kafka), name).get(k, []) if seq >= 1)
                == 3 + 4
                for k in again
            )
        ),
        120,
        "the replays handled or dead-lettered again",
    )
    second.stop()
    await running
    after = handled[before:]
    for key in recovered:
        assert [seq for k, seq in after if k == key] == [1, 2, 3, PER_KEY]  # key order, once each
    assert not [k for k, _ in after if k in again]  # nothing of a key whose replay failed
    dead = dead_lettered(broker_for(kafka), name)
    follows = "follows-blocked-group"
    expected = [(1, "failed"), (1, "replay-failed"), (2, follows), (2, follows), (3, follows), (3, follows)]
    for key in again:  # the original letters, the failed replay, and every later message behind it
        assert sorted(dead[key]) == sorted([*expected, (PER_KEY, follows)]), (key, dead[key])


@pytest.mark.parametrize(
    "point", ["consumer.replay.retry_copy:2", "consumer.replay.states", "consumer.replay.states:2"]
)
async def test_replay_killed_at_its_writes_then_run_again(kafka: Settings, unique: str, point: str) -> None:
    """The replay tool dies at a write (SIGKILL) and the operator runs it again; then a copy starts
    (adopting what the first run left): every dead letter is handled, in its key's order."""
    topic, name, bootstrap = f"rplk-{unique}", f"rplk-{unique}", kafka.bootstrap
    keys, per_key = 60, 3
    fill(bootstrap, topic, 2, keys, per_key)
    handled: list[tuple[str, int]] = []
    healed = False

    async def handle(message: Message) -> None:
        key, seq = parse(message.value)
        if blocked(key) and seq == 1 and not healed:
            raise PermanentError("not now")
        handled.append((key, seq))

    settings = ConsumerSettings(
        name=name, topic=topic, bootstrap=bootstrap, retry=RetryPolicy(max_attempts=1), heartbeat_s=0.5
    )
    blocked_keys = [f"k{k}" for k in range(keys) if blocked(f"k{k}")]
    dead = 2 * len(blocked_keys)  # seq 1 and seq 2 behind it
    copy = KeyedConsumer(settings, handle, member_id="a")
    running = asyncio.create_task(copy.run())
    await wait_until(
        lambda: sum(len(v) for v in dead_lettered(broker_for(kafka), name).values()) == dead,
        60,
        "the dead letters",
    )
    copy.stop()
    await running
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": bootstrap,
        "KAFKA_BROKER_KIND": kafka.broker_kind,
        "HUBSTREAM_CRASH_AT": point,
    }
    tool = [sys.executable, "-m", "app.cli.main", "consumer", "replay", name, "--all"]
    done = await asyncio.to_thread(subprocess.run, tool, env=env, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]

    del env["HUBSTREAM_CRASH_AT"]  # the operator runs the replay again
    done = await asyncio.to_thread(subprocess.run, tool, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    healed, before = True, len(handled)
    copy = KeyedConsumer(settings, handle, member_id="b")
    running = asyncio.create_task(copy.run())
    await wait_until(
        lambda: all({1, 2} <= {s for k, s in handled[before:] if k == key} for key in blocked_keys),
        60,
        "every dead letter handled",
    )
    copy.stop()
    await running
    after = handled[before:]
    for key in blocked_keys:
        firsts: list[int] = []
        for k, seq in after:
            if k == key and seq not in firsts:
                firsts.append(seq)
        assert firsts == [1, 2], (key, [s for k, s in after if k == key])
