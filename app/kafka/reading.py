"""Read partitions from chosen offsets to the end they had when the read began, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from app.errors import ServiceUnavailable
from app.kafka.admin import true_end_offsets

__all__ = ["read_from", "read_to_end", "read_topic"]


def read_to_end(
    bootstrap: str, topic: str, *, timeout_s: float = 30.0
) -> Iterator[tuple[bytes | None, bytes]]:
    """Every (key, value) of `topic` from offset 0 to the end it had when called, partition after
    partition; raises ServiceUnavailable when the broker does not hand them over in `timeout_s`."""
    for msg in read_topic(bootstrap, topic, timeout_s=timeout_s):
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


def read_topic(bootstrap: str, topic: str, *, timeout_s: float = 30.0) -> Iterator[Message]:
    """Every record of every partition of `topic` (none when it does not exist), to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hubstream-read-to-end"})
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    finally:
        consumer.close()
    if meta is None or meta.error is not None:
        return
    yield from read_from(bootstrap, {(topic, p): 0 for p in meta.partitions}, timeout_s=timeout_s)
