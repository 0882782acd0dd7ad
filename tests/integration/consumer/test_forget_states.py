"""Keys that failed once and recovered keep no state, against a real broker: a copy drops their
states from `<name>-state` once the commits pass them, keys with dead letters keep theirs, and a
copy started afterwards (loading the tombstones) still hands every key's later records over in
order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from app.consumer.inspect import key_state
from app.kafka.broker import BrokerPort
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, dead_lettered, fill, wait_until
from tests.integration.consumer.processes import Copies
from tests.support.consumer_handler import permanent, transient

pytestmark = pytest.mark.integration

KEYS, PER_KEY, PARTITIONS = 300, 3, 4


def _with_state(broker: BrokerPort, name: str, keys: list[str]) -> set[str]:
    return {key for key in keys if key_state(broker, name, key)}


def _counts(copies: Copies, label: str) -> dict[str, int]:
    """The counts a copy printed as it stopped (its log's last JSON object)."""
    text = (copies.home / f"{label}.log").read_text()
    return dict(orjson.loads(text[text.rindex("{") :]))


async def test_states_of_keys_that_recovered_are_forgotten_and_order_holds_after(
    kafka: Settings, unique: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap
    copies = Copies(tmp_path, bootstrap, f"fg-{unique}", f"fg-{unique}")
    total = fill(bootstrap, copies.topic, PARTITIONS, KEYS, PER_KEY)
    recovered = [f"k{k}" for k in range(KEYS) if transient(f"k{k}") and not permanent(f"k{k}", 1)]
    dead = [f"k{k}" for k in range(KEYS) if permanent(f"k{k}", 1)]
    assert recovered and dead
    try:
        copies.start("a", "--concurrency", "8")
        await wait_until(
            lambda: (
                len(set(copies.handled())) + sum(map(len, dead_lettered(copies.broker, copies.name).values()))
                >= total
            ),
            180,
            "every record handled or dead-lettered",
        )
        await wait_until(
            lambda: _with_state(copies.broker, copies.name, recovered + dead) == set(dead),
            60,
            "only the keys with dead letters to keep a state in the changelog",
        )
        assert copies.stop("a") == 0, copies.log_tail("a")
        assert _counts(copies, "a")["forgotten"] >= len(recovered)
        # One more record per key: the recovered keys fail their first attempt again.
        producer = Producer({"bootstrap.servers": bootstrap})
        for k in range(KEYS):
            producer.produce(copies.topic, key=f"k{k}".encode(), value=f"k{k}:{PER_KEY}".encode())
        assert producer.flush(30) == 0
        copies.start("b", "--concurrency", "8")
        await wait_until(
            lambda: (
                len(set(copies.handled())) + sum(map(len, dead_lettered(copies.broker, copies.name).values()))
                >= total + KEYS
            ),
            180,
            "the new records handled or dead-lettered",
        )
        await wait_until(
            lambda: _with_state(copies.broker, copies.name, recovered) == set(),
            60,
            "the recovered keys' new states forgotten too",
        )
        assert copies.stop("b") == 0, copies.log_tail("b")
    finally:
        copies.stop_all()
    letters = await asyncio.to_thread(dead_lettered, copies.broker, copies.name)
    duplicates = check_outcome(copies.handled(), letters, KEYS, PER_KEY + 1)
    later = [(key, seq) for key, seq in copies.handled() if key in recovered and seq == PER_KEY]
    assert len({key for key, _ in later}) == len(recovered)
    print(f"\n{len(recovered)} recovered keys forgotten twice, {len(dead)} kept; duplicates {duplicates}")
