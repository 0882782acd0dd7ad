"""The GroupState table's changelog read directly: the newest state record per group of a
subscription (used by shards when they open, and by offline operations such as unsideline).

Records are `<subscription>\x1f<group id>` -> JSON `{"e": epoch, "s": GroupState}`, in the slot
partition of the shard that owns the group.
"""

from __future__ import annotations

from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from app.kafka.admin import true_end_offsets

__all__ = ["SEP", "TABLE_NAME", "changelog_topic", "scan_states", "state_key"]

SEP = "\x1f"
TABLE_NAME = "subscription-group-state"


def state_key(subscription: str, group_id: str) -> bytes:
    return f"{subscription}{SEP}{group_id}".encode()


def changelog_topic(app_id: str) -> str:
    """The GroupState table's changelog (Faust names it `<app_id>-<table>-changelog`)."""
    return f"{app_id}-{TABLE_NAME}-changelog"


def scan_states(
    bootstrap: str, changelog: str, slots: int, subscription: str
) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """Newest state record per group of `subscription`: group -> (epoch, slot partition, value)."""
    prefix = f"{subscription}{SEP}".encode()
    tps = [(changelog, p) for p in range(slots)]
    ends = true_end_offsets(bootstrap, tps)
    wanted = {p: end for (_, p), end in zip(tps, ends, strict=True) if end > 0}
    latest: dict[str, tuple[int, int, dict[str, Any]]] = {}
    if not wanted:
        return latest
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "hubstream-group-state-loader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(changelog, p, 0) for p in wanted])
        while wanted:
            for msg in consumer.consume(5000, 1.0):
                p = msg.partition()
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= wanted.get(p, 0):
                        wanted.pop(p, None)
                    continue
                if msg.offset() + 1 >= wanted.get(p, 0):
                    wanted.pop(p, None)
                key = msg.key() or b""
                if not key.startswith(prefix):
                    continue
                group_id = key[len(prefix) :].decode()
                if msg.value() is None:
                    latest.pop(group_id, None)
                    continue
                value = orjson.loads(msg.value())
                known = latest.get(group_id)
                if known is None or int(value["e"]) >= known[0]:
                    latest[group_id] = (int(value["e"]), p, value)
    finally:
        consumer.close()
    return latest
