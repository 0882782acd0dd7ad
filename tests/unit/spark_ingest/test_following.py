"""The ingest's tasks follow the composite topic's produce pointer as every producer does: the
definition is read when a task starts and again every refresh interval. Before, every task wrote
the storage topic the driver saw at the start of the job, for the whole job (and its retries): after
a switch, the readers left that topic once it looked drained and what the job wrote next was lost."""

from __future__ import annotations

from typing import Any

from app.composite.model import CompositeTopic
from spark_ingest import executor
from spark_ingest.plan import IngestPlan


class _Definitions:
    """A metadata store whose definition of the topic the test moves."""

    def __init__(self, topic: CompositeTopic) -> None:
        self.topic = topic

    def get(self, name: str) -> CompositeTopic:
        assert name == self.topic.name
        return self.topic


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, partition: int, **_: Any) -> None:
        self.sent.append((topic, partition, key))

    def poll(self, _timeout: float) -> int:
        return 0


def _plan(topic: CompositeTopic, **follow: Any) -> IngestPlan:
    storage = topic.current
    return IngestPlan(
        input_root="/in",
        input_format="json",
        storage_topic=storage.name,
        partitions=storage.partitions,
        k=storage.k,
        producer_config={"bootstrap.servers": "broker:9092"},
        max_payload_bytes=1_000,
        **follow,
    )


def test_a_task_moves_to_the_new_storage_topic_after_a_switch(monkeypatch: Any) -> None:
    topic = CompositeTopic.create("events", 2).add_storage_topic(4)
    definitions = _Definitions(topic)
    monkeypatch.setitem(executor._STORES, ("broker:9092", "__meta"), definitions)
    plan = _plan(topic, composite_topic="events", metadata_topic="__meta", metadata_refresh_s=0.0)
    producer = _Producer()
    send = executor._sender(producer, plan, executor._Deliveries())  # type: ignore[arg-type]
    send("r1", b"1")
    definitions.topic = topic.switch_produce(now_ms=1)  # the operator's `topic switch`
    send("r1", b"2")
    send("r2", b"3")
    old, new = topic.storage_topics
    assert [t for t, _, _ in producer.sent] == [old.name, new.name, new.name]
    assert (producer.sent[1][0], producer.sent[1][1]) == definitions.topic.target("r1")


def test_a_plan_without_a_composite_topic_writes_its_storage_topic() -> None:
    topic = CompositeTopic.create("events", 3)
    producer = _Producer()
    send = executor._sender(producer, _plan(topic), executor._Deliveries())  # type: ignore[arg-type]
    send("r1", b"1")
    assert [(t, p) for t, p, _ in producer.sent] == [topic.target("r1")]
