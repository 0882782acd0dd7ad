"""Consume(r, p', offset) of the Varadhi design: read from one partition of one storage topic."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, TopicPartition

from app.composite.errors import ReadPointerOutOfRange
from app.composite.store import MetadataStore
from app.errors import ServiceUnavailable
from app.kafka.broker import confluent_seek
from app.kafka.consuming import partition_reader

__all__ = ["ConsumedMessage", "consume"]


@dataclass(frozen=True, slots=True)
class ConsumedMessage:
    storage_index: int
    topic: str
    partition: int
    offset: int
    group_id: str
    payload: bytes
    headers: tuple[tuple[str, bytes], ...]


def consume(
    store: MetadataStore,
    name: str,
    read_pointer: int,
    partition: int,
    offset: int,
    max_messages: int = 1,
    timeout_s: float = 10.0,
) -> list[ConsumedMessage]:
    """Read up to `max_messages` from `offset`; `offset` must be below the partition's end."""
    storage = store.get(name).storage(read_pointer, partition)
    consumer = partition_reader(store.bootstrap, "hubstream-reader", partition_eof=True)
    try:
        where = [(storage.name, partition)]
        low, _ = consumer.get_watermark_offsets(TopicPartition(storage.name, partition), timeout=timeout_s)
        if offset < low:  # a listed start can be too high (the embedded broker's): ask the port
            low = store.broker.start_offsets(where, timeout_s)[0]
        high = store.broker.end_offsets(where, timeout_s)[0]
        if not low <= offset < high:
            raise ReadPointerOutOfRange(
                f"{storage.name}[{partition}] offset={offset} is outside the readable range {low}..{high - 1}"
            )
        consumer.assign([TopicPartition(storage.name, partition, offset)])
        guard = store.broker.fetch_guard(confluent_seek(consumer))
        guard.expect(storage.name, partition, offset)
        wanted = min(max_messages, high - offset)
        out: list[ConsumedMessage] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < wanted and time.monotonic() < deadline:
            polled = guard.admit(consumer.consume(1, 0.5))
            if not polled:
                continue
            msg = polled[0]
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise ServiceUnavailable(f"{storage.name}[{partition}] offset={offset}: {msg.error()}")
            out.append(
                ConsumedMessage(
                    storage_index=read_pointer,
                    topic=storage.name,
                    partition=partition,
                    offset=msg.offset(),
                    group_id=(msg.key() or b"").decode("utf-8", "replace"),
                    payload=msg.value() or b"",
                    headers=tuple(msg.headers() or ()),
                )
            )
        return out
    finally:
        consumer.close()
