"""The ack agent seeks back on the Kafka consumer's own thread (Faust's `seek` raced with the
fetcher from the caller's thread and crashed the worker)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP

from app.kafka.faust_compat import seek_on_consumer_thread

ACKS = TP("batch-acks", 1)


class RecordingConsumer:
    def __init__(self, assigned: set[TP]) -> None:
        self.assigned = assigned
        self.waited: list[Mapping[TP, int]] = []

    def assignment(self) -> set[TP]:
        return self.assigned

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        self.waited.append(dict(partitions))

    async def seek(self, partition: TP, offset: int) -> None:
        raise AssertionError(f"seek from the caller's thread ({threading.current_thread().name})")


async def test_an_assigned_partition_is_sought_through_seek_wait() -> None:
    consumer = RecordingConsumer({ACKS})
    assert await seek_on_consumer_thread(consumer, ACKS, 7)
    assert consumer.waited == [{ACKS: 7}]


async def test_a_partition_no_longer_assigned_is_left_alone() -> None:
    consumer = RecordingConsumer(set())
    assert not await seek_on_consumer_thread(consumer, ACKS, 7)
    assert consumer.waited == []


def test_fausts_seek_wait_runs_the_seek_on_the_consumer_thread() -> None:
    """Pins the Faust method relied on: seek_wait hands the seek to the consumer thread."""
    source = inspect.getsource(AIOKafkaConsumerThread.seek_wait)
    assert "call_thread(self._seek_wait" in source
