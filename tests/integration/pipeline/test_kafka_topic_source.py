"""A pipeline reading a plain Kafka topic (`reader: {type: kafka}`), on the broker: every record of
every partition reaches the writer, the record key goes into `group_field`, a reader resumed from
positions takes only what came after them, and a topic that does not exist is a clear reader error."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import broker_for
from app.kafka_security import client_config
from app.pipeline.composite_source import KafkaTopicSource
from app.pipeline.offsets import ReaderState
from app.settings import Settings

from .support import run_until_idle

pytestmark = pytest.mark.integration


def _produce(stack: Settings, topic: str, ids: range) -> None:
    producer = Producer(client_config(stack.bootstrap))
    for i in ids:
        producer.produce(topic, orjson.dumps({"id": f"d{i}", "n": i}), key=f"k{i % 5}")
    assert producer.flush(30) == 0


def _inserted(target: Path) -> list[dict[str, object]]:
    lines = [orjson.loads(line) for line in target.read_bytes().splitlines()]
    return [line["data"] for line in lines if line["op"] == "insert"]


@pytest.mark.timeout(300)
async def test_a_plain_kafka_topic_is_read_whole_and_resumed(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    topic = f"plain-src-{unique}"
    KafkaAdmin(stack.bootstrap).ensure([TopicSpec(topic, 3)])
    _produce(stack, topic, range(60))
    target = tmp_path / "out.jsonl"
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: plain-{unique}\nbatch_size: 16\nbatch_wait_s: 0.05\n"
        f"reader: {{type: kafka, topic: {topic}, namespace: docs, group_field: key}}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {target}}}\n"
    )
    first = run_until_idle(file, tmp_path)
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    rows = _inserted(target)
    assert sorted(str(r["id"]) for r in rows) == sorted(f"d{i}" for i in range(60))
    assert all(r["key"] == f"k{int(str(r['n'])) % 5}" for r in rows)

    # Resumed from the positions the run's entries carried, a reader takes only what came after.
    ends = broker_for(stack).end_offsets([(topic, p) for p in range(3)])
    positions = {f"{topic}[{p}]": end for p, end in enumerate(ends)}
    _produce(stack, topic, range(60, 100))
    idle = stack.model_copy(update={"pipeline_exit_when_idle": True})
    source = KafkaTopicSource(idle, {"topic": topic, "namespace": "docs"}, 100, 0.05)
    try:
        resumed = [
            str(entry.message.data["id"])
            async for batch in source.read({"docs": ReaderState(position=positions)})
            for entry in batch
        ]
    finally:
        await source.close()
    assert sorted(resumed) == sorted(f"d{i}" for i in range(60, 100))


async def test_a_topic_that_does_not_exist_is_a_reader_error(stack: Settings, unique: str) -> None:
    source = KafkaTopicSource(stack, {"topic": f"absent-{unique}"}, 10, 0.05)
    try:
        with pytest.raises(ServiceUnavailable, match=f"absent-{unique}"):
            async for _ in source.read({}):
                break
    finally:
        await source.close()
