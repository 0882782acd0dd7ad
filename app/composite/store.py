"""Composite-topic metadata kept in Kafka itself: a compacted topic keyed by composite name.

Every process reads the same log, so every producer and worker sees the same storage
topics and produce pointer. The last record per key wins; a tombstone deletes.
Administrative changes (create, add storage, switch) are made by one operator at a
time; each record carries a version so readers can tell a newer definition.
"""

from __future__ import annotations

import time

import orjson

from app.composite.errors import CompositeTopicExists, UnknownCompositeTopic
from app.composite.model import CompositeTopic
from app.crashpoints import crash_point
from app.kafka.admin import TopicSpec
from app.kafka.broker import BrokerPort, broker_for
from app.kafka.compacted import CompactedLog
from app.settings import Settings

__all__ = ["MetadataStore"]


class MetadataStore:
    """Reads and writes composite-topic definitions in the metadata topic."""

    def __init__(self, broker: BrokerPort, metadata_topic: str, *, replication_factor: int) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.topic = metadata_topic
        self.replication_factor = replication_factor
        self._log = CompactedLog(
            broker,
            metadata_topic,
            reader_group="hubstream-metadata-reader",
            point="composite.metadata.write",
            replication_factor=replication_factor,
        )
        self.admin = self._log.admin  # one admin client for the store and its log
        self._topics: dict[str, CompositeTopic] = {}

    @classmethod
    def of(cls, settings: Settings) -> MetadataStore:
        """The store of these settings' broker and metadata topic."""
        return cls(
            broker_for(settings),
            settings.metadata_topic,
            replication_factor=settings.kafka_replication_factor,
        )

    # -- reading -------------------------------------------------------------------
    def _apply(self, name: str, value: bytes | None) -> None:
        if value is None:
            self._topics.pop(name, None)
            return
        parsed = CompositeTopic.from_json(orjson.loads(value))
        known = self._topics.get(name)
        if known is None or parsed.version >= known.version:
            self._topics[name] = parsed

    def refresh(self, timeout_s: float = 10.0) -> dict[str, CompositeTopic]:
        """Read every record written since the last refresh; return all definitions."""
        with self._log.lock:
            self._log.read_new(self._apply, timeout_s)
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
        self._log.write(name, value)

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

    def add_storage_topic(self, name: str, partitions: int, k: int | None = None) -> CompositeTopic:
        return self.put(self.get(name).add_storage_topic(partitions, k))

    def switch_produce(self, name: str) -> CompositeTopic:
        return self.put(self.get(name).switch_produce(int(time.time() * 1000)))

    def delete(self, name: str, *, missing_ok: bool = False) -> None:
        """The storage topics first, then the definition: cut in between, the definition still
        names the topics and deleting again finishes the job (the other order left storage topics
        no definition named, which a later create of the same name took over with their records)."""
        try:
            topic = self.get(name)
        except UnknownCompositeTopic:
            if missing_ok:
                return
            raise
        crash_point("composite.delete.topics")
        self.admin.delete([t.name for t in topic.storage_topics])
        self._write(name, None)
        self.refresh()

    def describe(self, name: str) -> dict[str, object]:
        topic = self.get(name)
        data = topic.to_json()
        for entry, storage in zip(data["storage_topics"], topic.storage_topics, strict=True):  # type: ignore[call-overload]
            entry["end_offsets"] = self.broker.end_offsets(
                [(storage.name, p) for p in range(storage.partitions)]
            )
        return data

    def close(self) -> None:
        self._log.close()
