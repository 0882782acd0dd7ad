"""Read partitions from chosen offsets to the end they had when the read began, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping

from confluent_kafka import KafkaError, Message, TopicPartition

from app.errors import ServiceUnavailable
from app.kafka.broker import BrokerPort, confluent_seek
from app.kafka.consuming import offset_client, partition_reader

__all__ = ["read_from", "read_to_end", "read_topic"]


def read_to_end(
    broker: BrokerPort, topic: str, *, timeout_s: float = 30.0
) -> Iterator[tuple[bytes | None, bytes]]:
    """Every (key, value) of `topic` from offset 0 to the end it had when called (in offset order
    within a partition); raises ServiceUnavailable when the broker does not hand them over in `timeout_s`."""
    for msg in read_topic(broker, topic, timeout_s=timeout_s):
        yield msg.key(), msg.value()


def read_from(
    broker: BrokerPort,
    starts: Mapping[tuple[str, int], int],
    *,
    timeout_s: float = 30.0,
    stops: Mapping[tuple[str, int], int] | None = None,
    group_id: str = "hubstream-read-to-end",
    compacted: bool = False,
) -> Generator[Message, None, None]:
    """The records of each (topic, partition) from its start offset to the end it has now (or to
    its `stops` offset, exclusive, when that comes first), in offset order within a partition;
    partitions are read together, their records interleaved. ServiceUnavailable when they are not
    all read within `timeout_s`. Offsets compacted away are simply absent: say `compacted=True` of
    a compacted topic, so that only each partition's start is checked (the broker's fetch guard),
    not every gap in it. The end is the broker port's answer (`broker.end_offsets`).
    Stopping early: close the generator (contextlib.closing) to close its consumer at once."""
    tps = list(starts)
    if not tps:
        return
    ends = dict(zip(tps, broker.end_offsets(tps, timeout_s=timeout_s), strict=True))
    if stops is not None:
        ends = {tp: min(end, stops.get(tp, end)) for tp, end in ends.items()}
    positions = {tp: starts[tp] for tp in tps if starts[tp] < ends[tp]}
    if not positions:
        return
    consumer = partition_reader(broker.bootstrap, group_id)
    guard = broker.fetch_guard(confluent_seek(consumer), compacted=compacted)
    try:
        assigned = [TopicPartition(t, p, at) for (t, p), at in positions.items()]
        consumer.assign(assigned)
        guard.expect_all(assigned)
        deadline = time.monotonic() + timeout_s
        while positions:
            if time.monotonic() > deadline:
                behind = ", ".join(f"{t}[{p}] at {at} of {ends[(t, p)]}" for (t, p), at in positions.items())
                raise ServiceUnavailable(f"read to the end timed out: {behind}")
            for msg in guard.admit(consumer.consume(1000, 0.5)):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise ServiceUnavailable(f"{msg.topic()}[{msg.partition()}]: {msg.error()}")
                tp = (msg.topic(), msg.partition())
                if tp not in positions or msg.offset() >= ends[tp]:
                    continue  # a partition read to its end, or a record past it
                positions[tp] = msg.offset() + 1
                if positions[tp] >= ends[tp]:
                    del positions[tp]
                yield msg
    finally:
        consumer.close()


def read_topic(
    broker: BrokerPort, topic: str, *, timeout_s: float = 30.0, compacted: bool = False
) -> Iterator[Message]:
    """Every record of every partition of `topic` (none when it does not exist), to its end."""
    consumer = offset_client(broker.bootstrap, "hubstream-read-to-end")
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    finally:
        consumer.close()
    if meta is None or meta.error is not None:
        return
    starts = {(topic, p): 0 for p in meta.partitions}
    yield from read_from(broker, starts, timeout_s=timeout_s, compacted=compacted)
