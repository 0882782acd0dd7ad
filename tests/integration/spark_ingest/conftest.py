"""One local Spark session for the whole test session (2 cores, small settings), the broker, Kafka read-back.

The ingest job needs Kafka only, so these tests depend on the broker (started or reused through
the same code as `hubstream stack up`), not on the whole stack: a busy Cosmos endpoint must not
fail them. A broker that cannot start fails the session loudly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from app.composite.model import StorageTopic
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec
from app.subscription.registry import SubscriptionRegistry
from spark_ingest.reader import build_session


@pytest.fixture
def metadata(kafka: Settings) -> Iterator[MetadataStore]:
    store = MetadataStore.of(kafka)
    yield store
    store.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", app_name="hubstream-tests", max_task_failures=2)
    yield session
    session.stop()


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str
    value: dict[str, object]


def read_back(settings: Settings, storage: StorageTopic) -> list[Record]:
    """Every record of a storage topic, read to the true end offset of each partition."""
    ends = broker_for(settings).end_offsets([(storage.name, p) for p in range(storage.partitions)])
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": "spark-ingest-test",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(storage.name, p, 0) for p in range(storage.partitions) if ends[p] > 0])
    records: list[Record] = []
    try:
        while len(records) < sum(ends):
            for msg in consumer.consume(10000, timeout=5):
                assert msg.error() is None, msg.error()
                records.append(
                    Record(msg.partition(), msg.offset(), msg.key().decode(), orjson.loads(msg.value()))
                )
    finally:
        consumer.close()
    return records


@pytest.fixture
def composite(metadata: MetadataStore, unique: str) -> Iterator[StorageTopic]:
    """A fresh composite topic with 6 partitions; yields its current storage topic."""
    topic = metadata.create(f"ingest-{unique}", 6)
    yield topic.current
    metadata.delete(topic.name)


@pytest.fixture
def hub_settings(stack: Settings, unique: str) -> Settings:
    return stack.model_copy(update={"cosmos_database": f"e2e-{unique}"})


@pytest.fixture
def subscription(stack: Settings, metadata: MetadataStore, unique: str) -> Iterator[tuple[str, str]]:
    topic, name = f"da-{unique}", f"hub-{unique}"
    metadata.create(topic, 6)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:
        ops.create(registry, metadata, name, topic, EndpointSpec("batch", "hub", timeout_s=60.0), start=True)
        yield topic, f"__subs-{unique}"
    finally:
        registry.close()
