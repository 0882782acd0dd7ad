"""One seeded worker per module: a composite topic with two storage topics, a stopped subscription with
lag and DLQ records, an exact batch 40/100 acked, a pipeline's commit log and writer offset, and hub
events for two actors. Every figure the tests expect is computed here from what was written."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest
from confluent_kafka import Producer

from app.batch.client import BatchClient
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.dataavailable import DataAvailable
from app.hub.service import MessageHub
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.pipeline.kafka_log import PipelineTopics
from app.pipeline.log_records import encode_records
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import WriterState
from app.pipeline.state import writer_key
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec
from app.subscription.registry import SubscriptionRegistry
from tests.integration.web.worker import Worker, drop_database, start_worker, worker_env, worker_settings


@dataclass
class Seeded:
    worker: Worker
    settings: Settings
    topic: str
    subscription: str
    pipeline: str
    batch_id: int
    batch_total: int
    batch_acked: int
    mq_records: int
    dlq_records: int
    log_records: int
    writer_next_offset: int
    hub_depth: dict[str, int]


def _produce(settings: Settings, topic: str, count: int, groups: int) -> None:
    producer = CompositeProducer(settings, topic)
    for i in range(count):
        producer.produce(f"group-{i % groups}", {"n": i})
    producer.flush()


def _seed_pipeline(settings: Settings, name: str, log_records: int, writer_offset: int) -> None:
    topics = PipelineTopics.of(name, settings.app_id)
    KafkaAdmin(settings.bootstrap, settings.kafka_replication_factor).create(
        [TopicSpec(topics.log, 1), TopicSpec(topics.changelog, 1), TopicSpec(topics.control, 1)]
    )
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    entries = [NewEntry(Message(Op.INSERT, 0, "seed", {"n": i}), Mode.SYNC) for i in range(log_records)]
    for record in encode_records(entries, 0, 1_000_000):  # entries 0 .. log_records - 1
        producer.produce(topics.log, record.value, record.key, 0, headers=record.headers)
    state = WriterState(offset=writer_offset).to_json()
    producer.produce(topics.changelog, orjson.dumps(state), orjson.dumps(writer_key("mysql")), partition=0)
    assert producer.flush(30) == 0


async def _seed_hub(settings: Settings, depth: dict[str, int]) -> None:
    hub = await MessageHub.open(settings)
    try:
        events = [
            DataAvailable(str(uuid.uuid4()), actor, "timeseries", "RSM-012", 1000)
            for actor, n in depth.items()
            for _ in range(n)
        ]
        await hub.save(events)
    finally:
        await hub.close()


@pytest.fixture(scope="module")
def seeded(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    unique = uuid.uuid4().hex[:10]
    home = tmp_path_factory.mktemp("web-worker")
    env = worker_env(stack, unique, home)
    settings = worker_settings(stack, env)
    topic, subscription, pipeline = f"web-mq-{unique}", f"web-sub-{unique}", f"web-pipe-{unique}"
    metadata = MetadataStore.of(settings)
    registry = SubscriptionRegistry.of(settings)
    metadata.create(topic, 4)
    _produce(settings, topic, 30, groups=6)
    metadata.add_storage_topic(topic, 4)
    metadata.switch_produce(topic)
    _produce(settings, topic, 10, groups=6)
    endpoint = EndpointSpec("http", "http://127.0.0.1:9/unused")
    sub = ops.create(registry, metadata, subscription, topic, endpoint, shard_count=2, start=False)
    _produce(settings, sub.dlq_topic, 3, groups=2)
    _seed_pipeline(settings, pipeline, log_records=12, writer_offset=4)
    hub_depth = {f"actor-a-{unique}": 5, f"actor-b-{unique}": 3}
    asyncio.run(_seed_hub(settings, hub_depth))
    metadata.close()
    registry.close()

    worker = start_worker(env, home)
    try:
        # Through the batch client, as programs do: a partition still recovering or moving right
        # after start (a 503) is retried, not a failed fixture.
        with BatchClient(worker.url) as batches:
            batch_id = batches.create_exact(f"web-{unique}")
            item_ids = batches.add_item_ids(batch_id, 100)
            assert len(item_ids) == 100
            batches.ack(item_ids[:40])
        yield Seeded(
            worker=worker,
            settings=settings,
            topic=topic,
            subscription=subscription,
            pipeline=pipeline,
            batch_id=batch_id,
            batch_total=100,
            batch_acked=40,
            mq_records=40,
            dlq_records=3,
            log_records=12,
            writer_next_offset=5,
            hub_depth=hub_depth,
        )
    finally:
        worker.stop()
        asyncio.run(drop_database(settings))
