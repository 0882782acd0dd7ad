"""Read a topic from its beginning to its current end, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from app.errors import ServiceUnavailable
from app.kafka.admin import true_end_offsets

__all__ = ["read_to_end"]


def read_to_end(
    bootstrap: str, topic: str, *, timeout_s: float = 30.0
) -> Iterator[tuple[bytes | None, bytes]]:
    """Every (key, value) of `topic` from offset 0 to the end it had when called, partition after
    partition; raises ServiceUnavailable when the broker does not hand them over in `timeout_s`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "hubstream-read-to-end",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return
        partitions = sorted(meta.partitions)
        ends = true_end_offsets(bootstrap, [(topic, p) for p in partitions], timeout_s=timeout_s)
        deadline = time.monotonic() + timeout_s
        for partition, end in zip(partitions, ends, strict=True):
            if end <= 0:
                continue
            consumer.assign([TopicPartition(topic, partition, 0)])
            position = 0
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
                yield msg.key(), msg.value()
    finally:
        consumer.close()
