"""The ingest's tasks follow the composite topic's produce pointer as every producer does: the
definition is read when a task starts and again every refresh interval. Before, every task wrote
the storage topic the driver saw at the start of the job, for the whole job (and its retries): after
a switch, the readers left that topic once it looked drained and what the job wrote next was lost."""

from __future__ import annotations

from typing import Any

import pytest

from app.composite.model import CompositeTopic
from spark_ingest import executor
from spark_ingest.errors import DeliveryFailed
from spark_ingest.plan import IngestPlan


class _Definitions:
    """A metadata store whose definition of the topic the test moves."""

    def __init__(self, topic: CompositeTopic) -> None:
        self.topic = topic

    def get(self, name: str) -> CompositeTopic:
        assert name == self.topic.name
        return self.topic


class _Producer:
    """Records sends and flushes (`"flush"` in `sent`); `unconfirmed` records a flush leaves."""

    def __init__(self, unconfirmed: int = 0) -> None:
        self.sent: list[tuple[str, int, bytes] | str] = []
        self.unconfirmed = unconfirmed

    def produce(self, topic: str, value: bytes, key: bytes, partition: int, **_: Any) -> None:
        self.sent.append((topic, partition, key))

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        self.sent.append("flush")
        return self.unconfirmed


def _plan() -> IngestPlan:
    return IngestPlan(
        input_root="/in",
        input_format="json",
        composite_topic="events",
        metadata_topic="__meta",
        metadata_refresh_s=0.0,  # every send looks again: the switch is seen at the next one
        max_group_id_bytes=64,
        replication_factor=1,
        producer_config={"bootstrap.servers": "broker:9092"},
        max_payload_bytes=1_000,
    )


def test_a_task_moves_to_the_new_storage_topic_after_a_switch(monkeypatch: Any) -> None:
    topic = CompositeTopic.create("events", 2).add_storage_topic(4)
    definitions = _Definitions(topic)
    monkeypatch.setitem(executor._STORES, ("broker:9092", "__meta"), definitions)
    producer = _Producer()
    send = executor._sender(producer, _plan(), executor._Deliveries())  # type: ignore[arg-type]
    send("r1", b"1")
    definitions.topic = topic.switch_produce(now_ms=1)  # the operator's `topic switch`
    send("r1", b"2")
    send("r2", b"3")
    old, new = topic.storage_topics
    sent = [t if isinstance(t, str) else t[0] for t in producer.sent]
    assert sent == [old.name, "flush", new.name, new.name], "what went to the old topic is confirmed first"
    assert producer.sent[2][:2] == definitions.topic.target("r1")


def test_a_task_whose_records_are_unconfirmed_at_a_switch_fails_for_spark_to_run_again(
    monkeypatch: Any,
) -> None:
    topic = CompositeTopic.create("events", 2).add_storage_topic(4)
    definitions = _Definitions(topic)
    monkeypatch.setitem(executor._STORES, ("broker:9092", "__meta"), definitions)
    producer = _Producer(unconfirmed=1)
    send = executor._sender(producer, _plan(), executor._Deliveries())  # type: ignore[arg-type]
    send("r1", b"1")
    definitions.topic = topic.switch_produce(now_ms=1)
    with pytest.raises(DeliveryFailed, match="1 records were unconfirmed"):
        send("r1", b"2")
    sends = [t for t in producer.sent if not isinstance(t, str)]
    assert [t for t, _, _ in sends] == [topic.storage_topics[0].name], "nothing went to the new topic"
