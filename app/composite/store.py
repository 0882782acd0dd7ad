"""Composite-topic metadata kept in Kafka itself: a compacted topic keyed by composite name.

Every process reads the same log, so every producer and worker sees the same storage
topics and produce pointer. The last record per key wins; a tombstone deletes.
Administrative changes (create, add storage, switch) are made by one operator at a
time; each record carries a version so readers can tell a newer definition.
"""

from __future__ import annotations

import threading
import time

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from app.composite.errors import CompositeTopicExists, UnknownCompositeTopic
from app.composite.model import CompositeTopic
from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.writing import produce_confirmed

__all__ = ["MetadataStore"]

COMPACTED = {"cleanup.policy": "compact"}


class MetadataStore:
    """Reads and writes composite-topic definitions in the metadata topic."""

    def __init__(self, bootstrap: str, metadata_topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = metadata_topic
        self.admin = KafkaAdmin(bootstrap)
        self._topics: dict[str, CompositeTopic] = {}
        self._position = 0
        self._consumer: Consumer | None = None
        self._offsets: Consumer | None = None
        self._lock = threading.Lock()
        self._ready = False

    # -- reading -------------------------------------------------------------------
    def _ensure(self) -> Consumer:
        if not self._ready:
            self.admin.create([TopicSpec(self.topic, 1, COMPACTED)])
            self._ready = True
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": "hubstream-metadata-reader",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
            self._consumer.assign([TopicPartition(self.topic, 0, 0)])
            # Watermarks come from a second, idle consumer: on the reading consumer the
            # request would queue behind its long-poll fetch (fetch.wait.max.ms).
            self._offsets = Consumer(
                {"bootstrap.servers": self.bootstrap, "group.id": "hubstream-metadata-offsets"}
            )
        return self._consumer

    def refresh(self, timeout_s: float = 10.0) -> dict[str, CompositeTopic]:
        """Read every record written since the last refresh; return all definitions."""
        with self._lock:
            consumer = self._ensure()
            assert self._offsets is not None
            # Each definition is written and flushed on its own, so every record batch holds
            # one record and ListOffsets is exact here (see KafkaAdmin.end_offsets).
            _, high = self._offsets.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout_s)
            deadline = time.monotonic() + timeout_s
            while self._position < high:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(
                        f"{self.topic}[0] offset={self._position}: metadata read timed out"
                    )
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise ServiceUnavailable(f"{self.topic}[0]: {msg.error()}")
                self._position = msg.offset() + 1
                key = msg.key().decode()
                value = msg.value()
                if value is None:
                    self._topics.pop(key, None)
                    continue
                parsed = CompositeTopic.from_json(orjson.loads(value))
                known = self._topics.get(key)
                if known is None or parsed.version >= known.version:
                    self._topics[key] = parsed
            return dict(self._topics)

    def get(self, name: str) -> CompositeTopic:
        topic = self.refresh().get(name)
        if topic is None:
            raise UnknownCompositeTopic(f"no composite topic named {name!r}")
        return topic

    def names(self) -> list[str]:
        return sorted(self.refresh())

    # -- writing -------------------------------------------------------------------
    def _write(self, name: str, value: bytes | None) -> None:
        produce_confirmed(self.bootstrap, self.topic, name.encode(), value, point="composite.metadata.write")

    def put(self, topic: CompositeTopic) -> CompositeTopic:
        """Create missing storage topics first, then publish the definition."""
        self.admin.create([TopicSpec(t.name, t.partitions) for t in topic.storage_topics])
        self._write(topic.name, orjson.dumps(topic.to_json()))
        self.refresh()
        return topic

    def create(self, name: str, partitions: int, *, exist_ok: bool = False) -> CompositeTopic:
        topic = CompositeTopic.create(name, partitions)
        known = self.refresh().get(name)
        if known is not None:
            if exist_ok:
                return known
            raise CompositeTopicExists(f"composite topic {name!r} already exists")
        return self.put(topic)

    def add_storage_topic(self, name: str, partitions: int) -> CompositeTopic:
        return self.put(self.get(name).add_storage_topic(partitions))

    def switch_produce(self, name: str) -> CompositeTopic:
        return self.put(self.get(name).switch_produce())

    def delete(self, name: str) -> None:
        topic = self.get(name)
        self._write(name, None)
        self.admin.delete([t.name for t in topic.storage_topics])
        self.refresh()

    def describe(self, name: str) -> dict[str, object]:
        topic = self.get(name)
        data = topic.to_json()
        for entry, storage in zip(data["storage_topics"], topic.storage_topics, strict=True):  # type: ignore[call-overload]
            entry["end_offsets"] = self.admin.end_offsets(storage.name, storage.partitions)
        return data

    def close(self) -> None:
        with self._lock:  # not under a refresh still running in another thread
            for consumer in (self._consumer, self._offsets):
                if consumer is not None:
                    consumer.close()
            self._consumer = self._offsets = None
