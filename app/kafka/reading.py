"""Read partitions from chosen offsets to the end they had when the read began, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from app.errors import ServiceUnavailable
from app.kafka.admin import true_end_offsets

__all__ = ["read_caught_up", "read_from", "read_to_end"]


def read_to_end(
    bootstrap: str, topic: str, *, timeout_s: float = 30.0
) -> Iterator[tuple[bytes | None, bytes]]:
    """Every (key, value) of `topic` from offset 0 to the end it had when called, partition after
    partition; raises ServiceUnavailable when the broker does not hand them over in `timeout_s`."""
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "hubstream-read-to-end"})
    try:
        meta = probe.list_topics(topic, timeout=timeout_s).topics.get(topic)
    finally:
        probe.close()
    if meta is None or meta.error is not None:
        return
    starts = {(topic, p): 0 for p in sorted(meta.partitions)}
    for msg in read_from(bootstrap, starts, timeout_s=timeout_s):
        yield msg.key(), msg.value()


def read_from(
    bootstrap: str, starts: Mapping[tuple[str, int], int], *, timeout_s: float = 30.0
) -> Iterator[Message]:
    """The records of each (topic, partition) from its start offset to the end it has now, in
    offset order, partition after partition; ServiceUnavailable past `timeout_s`."""
    tps = list(starts)
    if not tps:
        return
    ends = true_end_offsets(bootstrap, tps, timeout_s=timeout_s)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "hubstream-read-to-end",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        deadline = time.monotonic() + timeout_s
        for (topic, partition), end in zip(tps, ends, strict=True):
            position = starts[(topic, partition)]
            if position >= end:
                continue
            consumer.assign([TopicPartition(topic, partition, position)])
            while position < end:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(f"{topic}[{partition}]: read to offset {position} of {end}")
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise ServiceUnavailable(f"{topic}[{partition}]: {msg.error()}")
                position = msg.offset() + 1
                yield msg
    finally:
        consumer.close()


def read_caught_up(bootstrap: str, topic: str, *, timeout_s: float = 30.0) -> Iterator[Message]:
    """Every record of `topic` from offset 0 until each partition reports its end, or hands over a
    record written after the read began: for topics written to all the time (heartbeats), where
    a fixed end offset taken first may never come into view; ServiceUnavailable past `timeout_s`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "hubstream-read-to-end",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,  # an empty fetch (the end) comes back before the next write
        }
    )
    started_ms = int(time.time() * 1000)
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return
        waiting = set(meta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in waiting])
        deadline = time.monotonic() + timeout_s
        while waiting:
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"{topic}: partitions {sorted(waiting)} not read to their end")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise ServiceUnavailable(f"{topic}[{msg.partition()}]: {msg.error()}")
                waiting.discard(msg.partition())
                continue
            if msg.partition() not in waiting:
                continue
            yield msg
            if msg.timestamp()[1] >= started_ms:  # written after the read began: caught up
                waiting.discard(msg.partition())
    finally:
        consumer.close()
