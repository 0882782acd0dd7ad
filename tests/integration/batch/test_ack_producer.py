"""AckProducer on the real broker: a record the broker refuses, or never confirms, is reported
(by send() or flush()), so the hub sink fails the batch (delivered again) instead of counting
its items acked."""

from __future__ import annotations

import socket

import pytest

from app.batch.acks import AckProducer
from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.settings import Settings

pytestmark = pytest.mark.integration

GROUP = "0b9e1f44-6d0c-4a53-9d52-0c1f3c4f2a10"


def test_a_record_for_a_partition_the_topic_lacks_is_refused_at_send(kafka: Settings, unique: str) -> None:
    topic = f"acks-{unique}"
    KafkaAdmin(kafka.bootstrap).create([TopicSpec(topic, 2)])
    producer = AckProducer(kafka.bootstrap, topic, partitions=8)  # batches of partitions 2..7 can't land
    assert producer.send([f"8:{GROUP}:0", f"9:{GROUP}:0"]) == 2  # partitions 0 and 1: fine
    assert producer.flush(30) == 0
    with pytest.raises(ServiceUnavailable, match=r"\[5\]"):
        producer.send([f"13:{GROUP}:0"])


def test_flush_counts_records_that_were_never_confirmed(unique: str) -> None:
    # A broker that never answers (nothing listens on the port): the record times out in the producer.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        silent = f"127.0.0.1:{probe.getsockname()[1]}"
    producer = AckProducer(silent, f"acks-{unique}", partitions=1, config={"message.timeout.ms": 1500})
    producer.send([f"8:{GROUP}:0"])
    assert producer.flush(30) == 1, "a record that timed out in the producer is not delivered"
    assert producer.flush(30) == 0  # reported once
