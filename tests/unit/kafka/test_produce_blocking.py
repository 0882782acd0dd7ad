"""`produce_blocking`: a full local queue is waited out while deliveries are served; a record the
producer refuses before sending raises the project's error, RecordRefused when it can never go."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from app.kafka.producing import ProduceFailed, RecordRefused, produce_blocking


class FakeProducer:
    """Refuses with BufferError until `poll` has served `full_for` times (deliveries drained)."""

    def __init__(self, full_for: int = 0, refuse: KafkaException | None = None) -> None:
        self.full_for, self.refuse = full_for, refuse
        self.polls = 0
        self.produced: list[tuple[Any, ...]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, **options: Any) -> None:
        if self.refuse is not None:
            raise self.refuse
        if self.polls < self.full_for:
            raise BufferError("Local: Queue full")
        self.produced.append((topic, value, key, options))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


def test_a_full_queue_is_served_until_the_record_fits() -> None:
    producer = FakeProducer(full_for=3)
    produce_blocking(producer, "t", b"v", b"k", partition=2)
    assert producer.polls == 3
    assert producer.produced == [("t", b"v", b"k", {"partition": 2})]


def test_options_not_given_are_left_to_the_producer() -> None:
    producer = FakeProducer()
    produce_blocking(producer, "t", None)
    assert producer.produced == [("t", None, None, {})]


def test_a_record_too_large_is_refused_for_good() -> None:
    producer = FakeProducer(refuse=KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    with pytest.raises(RecordRefused, match=r"t\[1\]"):
        produce_blocking(producer, "t", b"v", partition=1)


def test_another_refusal_is_a_produce_failure_that_may_pass() -> None:
    producer = FakeProducer(refuse=KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION)))
    with pytest.raises(ProduceFailed) as raised:
        produce_blocking(producer, "t", b"v", partition=9)
    assert not isinstance(raised.value, RecordRefused)
