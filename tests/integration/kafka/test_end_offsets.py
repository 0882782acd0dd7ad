"""End offsets and reads to the end on the real broker. The embedded broker's ListOffsets answers
the base offset of the last record batch + 1, so the true end comes from a fetch response; and on
a topic written all the time, the end must still come back at once (it used to wait for an end
of partition that a busy topic never reaches)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer, TopicPartition

from app.kafka.admin import KafkaAdmin, TopicSpec, resume_offsets
from app.kafka.broker import broker_for, broker_of
from app.kafka.consuming import offset_client
from app.kafka.reading import read_to_end
from app.settings import Settings

pytestmark = pytest.mark.integration

RECORDS_IN_LONG_PARTITION = 50_000


def produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0


def test_the_end_of_several_batches_is_their_last_offset_plus_one(kafka: Settings, unique: str) -> None:
    topic = f"ends-{unique}"
    KafkaAdmin(kafka.bootstrap).create([TopicSpec(topic, 2)])
    produce(kafka.bootstrap, topic, 0, 10)  # one batch
    produce(kafka.bootstrap, topic, 0, 5)  # another: ListOffsets says 11 here
    produce(kafka.bootstrap, topic, 1, 3)
    assert broker_for(kafka).end_offsets([(topic, 0), (topic, 1)]) == [15, 3]
    assert len(list(read_to_end(broker_for(kafka), topic))) == 18


def test_a_topic_written_all_the_time_has_an_end_at_once(kafka: Settings, unique: str) -> None:
    topic = f"busy-{unique}"
    KafkaAdmin(kafka.bootstrap).create([TopicSpec(topic, 1)])
    produce(kafka.bootstrap, topic, 0, 100)
    stop = threading.Event()

    def keep_writing() -> None:
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
        while not stop.is_set():
            producer.produce(topic, value=b"more")
            producer.poll(0.001)
        producer.flush(10)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        started = time.monotonic()
        (end,) = broker_for(kafka).end_offsets([(topic, 0)], timeout_s=10)
        took = time.monotonic() - started
        assert end >= 100
        read = len(list(read_to_end(broker_for(kafka), topic, timeout_s=20)))
    finally:
        stop.set()
        writer.join(10)
    assert took < 5, f"the end took {took:.1f} s on a busy topic"
    assert read >= 100


def test_the_end_of_a_long_partition_is_found(kafka: Settings, unique: str) -> None:
    """The embedded broker answers an empty fetch when reading to a record of a long partition
    outlasts the fetch's wait; the probe's wait must allow for it (a 10 ms wait never found the end
    of a 50,000-record table changelog, and workers' table recovery crashed)."""
    topic = f"long-{unique}"
    KafkaAdmin(kafka.bootstrap).create([TopicSpec(topic, 1)])
    # One record per batch, as a table's changelog is written: the broker's read walks every batch.
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "batch.num.messages": 1, "linger.ms": 0})
    for i in range(RECORDS_IN_LONG_PARTITION):
        producer.produce(topic, value=b"%0200d" % i, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    (end,) = broker_for(kafka).end_offsets([(topic, 0)], timeout_s=10)
    assert end == RECORDS_IN_LONG_PARTITION


def test_start_offsets_come_from_a_read_and_resume_offsets_from_commits(kafka: Settings, unique: str) -> None:
    topic, group = f"starts-{unique}", f"starts-{unique}"
    KafkaAdmin(kafka.bootstrap).create([TopicSpec(topic, 3)])
    produce(kafka.bootstrap, topic, 0, 10)
    produce(kafka.bootstrap, topic, 1, 4)
    tps = [(topic, 0), (topic, 1), (topic, 2)]
    assert broker_for(kafka).start_offsets(tps) == [0, 0, 0]  # partition 2 holds none: its end
    committer = offset_client(kafka.bootstrap, group)
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 6)], asynchronous=False)
    finally:
        committer.close()
    assert resume_offsets(broker_for(kafka), group, tps) == [6, 0, 0]


def test_the_standard_answer_is_listoffsets_as_the_broker_gives_it(kafka: Settings, unique: str) -> None:
    """The standard adapter asks ListOffsets once and takes its answer: on this broker the same as
    a consumer's listed watermarks (on the embedded broker the port chooses for it, that can be
    short of the true end: what the embedded adapter works around)."""
    topic = f"listed-{unique}"
    KafkaAdmin(kafka.bootstrap).create([TopicSpec(topic, 2)])
    produce(kafka.bootstrap, topic, 0, 10)
    produce(kafka.bootstrap, topic, 0, 5)
    tps = [(topic, 0), (topic, 1)]
    lookups = offset_client(kafka.bootstrap, f"{topic}-lookups")
    try:
        listed = [lookups.get_watermark_offsets(TopicPartition(t, p), timeout=10) for t, p in tps]
    finally:
        lookups.close()
    standard = broker_of("kafka", kafka.bootstrap)
    assert standard.end_offsets(tps) == [high for _, high in listed]
    assert standard.start_offsets(tps) == [low for low, _ in listed]
    chosen = broker_for(kafka).end_offsets(tps)
    assert all(listed <= true for listed, true in zip(standard.end_offsets(tps), chosen, strict=True))
