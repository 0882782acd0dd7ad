"""Shared by the consumer library's integration tests: a topic filled with keyed records whose
values are (key, sequence) pairs, and the checks on what the handlers saw."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from confluent_kafka import Producer

from app.consumer.inspect import dead_letters
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import BrokerPort
from tests.support.waiting import async_wait_until


def fill(bootstrap: str, topic: str, partitions: int, keys: int, per_key: int) -> int:
    """`keys` keys x `per_key` records, interleaved; value `key:seq`. Returns the record count."""
    KafkaAdmin(bootstrap).ensure([TopicSpec(topic, partitions)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for seq in range(per_key):
        for k in range(keys):
            producer.produce(topic, key=f"k{k}".encode(), value=f"k{k}:{seq}".encode())
            producer.poll(0)
    assert producer.flush(30) == 0
    return keys * per_key


def parse(value: bytes | None) -> tuple[str, int]:
    key, seq = (value or b"").decode().split(":")
    return key, int(seq)


def dead_lettered(broker: BrokerPort, name: str) -> dict[str, list[tuple[int, str]]]:
    """key -> [(seq, reason)] of every dead letter."""
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for entry in dead_letters(broker, name, limit=1_000_000):
        key, seq = parse(entry["value"].encode())
        out[key].append((seq, entry["reason"]))
    return out


def check_outcome(
    handled: list[tuple[str, int]], dead: dict[str, list[tuple[int, str]]], keys: int, per_key: int
) -> int:
    """Every record handled or dead-lettered; per key, first handlings in sequence order and
    nothing after a key's failed message (BLOCK_GROUP). Returns the duplicates (handled again)."""
    firsts: dict[str, list[int]] = defaultdict(list)
    duplicates = 0
    seen: set[tuple[str, int]] = set()
    for key, seq in handled:
        if (key, seq) in seen:
            duplicates += 1
            continue
        seen.add((key, seq))
        firsts[key].append(seq)
    dead_set = {(key, seq) for key, entries in dead.items() for seq, _ in entries}
    missing = [
        (f"k{k}", s) for k in range(keys) for s in range(per_key) if (f"k{k}", s) not in seen | dead_set
    ]
    assert not missing, f"{len(missing)} records neither handled nor dead-lettered, e.g. {missing[:5]}"
    for key, seqs in firsts.items():
        assert seqs == sorted(seqs), f"{key} handled out of order: {seqs}"
    for key, entries in dead.items():
        failed = min(seq for seq, reason in entries if reason == "failed")
        after = [seq for seq in firsts.get(key, []) if seq > failed]
        assert not after, f"{key}: {after} handled after {failed} was dead-lettered"
    return duplicates


async def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    await async_wait_until(check, timeout_s, what, poll_s=0.1)
