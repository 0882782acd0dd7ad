"""A produce load across broker restarts, and what the broker kept of it: numbered records from
one producer into a topic of their own, the broker restarted at fixed shares of the records
acknowledged, then every record read back from offset 0 (for the durable-broker test and
bench/broker_restart.py)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka_security import client_config
from app.waiting import poll_until

__all__ = ["RestartLoad", "run_restart_load"]

UNACKED_AT_MOST = 20_000  # the producer runs ahead of its acknowledgements by this much


@dataclass(frozen=True)
class RestartLoad:
    records: int
    acknowledged: int
    failed: int  # reported to the producer as not delivered
    lost: int  # acknowledged, and not there afterwards
    duplicates: int

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _read_all(bootstrap: str, topic: str, partitions: int, wanted: set[int]) -> Counter[int]:
    """Every record of `topic` from offset 0, until each of `wanted` was read or 10 s passed
    with nothing new (the embedded broker's end offsets are not to be trusted after a restart)."""
    consumer = Consumer(
        client_config(bootstrap, **{"group.id": f"{topic}-reader", "enable.auto.commit": False})
    )
    seen: Counter[int] = Counter()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        quiet_since = time.monotonic()
        while not wanted <= seen.keys() and time.monotonic() - quiet_since < 10:
            for message in consumer.consume(10_000, 0.5):
                if message.error() is None:
                    seen[int(message.value() or b"-1")] += 1
                    quiet_since = time.monotonic()
    finally:
        consumer.close()
    return seen


def run_restart_load(
    bootstrap: str,
    topic: str,
    producer_config: dict[str, Any],
    restart: Callable[[], None],
    *,
    records: int = 100_000,
    partitions: int = 12,
    restarts: int = 3,
) -> RestartLoad:
    KafkaAdmin(bootstrap).create([TopicSpec(topic, partitions)])
    acked: set[int] = set()
    failed: list[str] = []
    lock = threading.Lock()

    def delivered(error: KafkaError | None, message: Message) -> None:
        with lock:
            if error is None:
                acked.add(int(message.value() or b"-1"))
            else:
                failed.append(str(error))

    producer = Producer(producer_config)

    def produce() -> None:
        for n in range(records):
            while n - len(acked) - len(failed) > UNACKED_AT_MOST:
                producer.poll(0.05)
            while True:
                try:
                    producer.produce(topic, str(n).encode(), key=str(n % 997).encode(), on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush(600)

    writer = threading.Thread(target=produce, name="restart-load")
    writer.start()
    for i in range(1, restarts + 1):
        share = i * records // (restarts + 2)

        def reached(share: int = share) -> bool:
            return len(acked) >= share or not writer.is_alive()

        assert poll_until(reached, 300)
        restart()
    writer.join(700)
    assert not writer.is_alive(), "the producer did not finish"
    seen = _read_all(bootstrap, topic, partitions, acked)
    return RestartLoad(
        records=records,
        acknowledged=len(acked),
        failed=len(failed),
        lost=len(acked - seen.keys()),
        duplicates=sum(count - 1 for count in seen.values()),
    )
