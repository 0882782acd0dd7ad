"""What a consumer reads and writes on the broker: its source resolved (a topic, or a composite
topic's storage chain), whether the group drained a storage topic, and its own topics created."""

from __future__ import annotations

import logging
from dataclasses import replace

from app.composite.advance import Drained
from app.composite.errors import UnknownCompositeTopic
from app.composite.store import MetadataStore
from app.consumer.model import ConsumerSettings, record_key
from app.consumer.source import Source
from app.errors import ConfigError
from app.kafka.admin import KafkaAdmin, TopicSpec, committed_offsets
from app.kafka.broker import broker_for

__all__ = ["drained_facts", "ensure_topics", "read_as_named", "resolve_source"]

log = logging.getLogger(__name__)
_QUESTIONS_KEPT_MS = 3_600_000  # requests and replies are worth seconds; an hour is plenty


def read_as_named(settings: ConsumerSettings) -> ConsumerSettings:
    """The settings with `topic` read as a composite topic's name when no Kafka topic has that
    name and the metadata topic defines one (its Kafka topics are the storage topics
    `<name>.0`, `<name>.1`, …), as `hubstream subscription create --topic` takes it (blocking)."""
    if settings.composite_topic is not None or settings.topic in KafkaAdmin(settings.bootstrap).topics():
        return settings
    store = MetadataStore(
        broker_for(settings), settings.metadata_topic, replication_factor=settings.replication_factor
    )
    try:
        store.get(settings.topic)
    except UnknownCompositeTopic:
        return settings  # resolve_source then says the topic does not exist
    finally:
        store.close()
    log.info("%s: %r is a composite topic: reading its storage topics", settings.name, settings.topic)
    return replace(settings, topic="", composite_topic=settings.topic)


def resolve_source(settings: ConsumerSettings, store: MetadataStore | None = None) -> Source:
    """The source as defined now (blocking): the topic, or the composite topic read from `store`."""
    if settings.composite_topic is None:
        partitions = KafkaAdmin(settings.bootstrap).topics().get(settings.topic)
        if partitions is None:
            raise ConfigError(f"topic {settings.topic!r} does not exist on {settings.bootstrap}")
        return Source.of_topic(settings.topic, partitions)
    if store is None:
        raise ConfigError(f"composite topic {settings.composite_topic!r}: no metadata store to resolve it")
    try:
        return Source.of_composite(
            store.get(settings.composite_topic), record_keys=settings.key_of is record_key
        )
    except UnknownCompositeTopic as exc:
        raise ConfigError(
            f"composite topic {settings.composite_topic!r} is not defined in {store.topic} on "
            f"{settings.bootstrap}"
        ) from exc


def drained_facts(settings: ConsumerSettings, source: Source, idx: int) -> Drained:
    """Storage topic `idx`'s partitions: has the consumer group committed each to its end
    (blocking)? Judged on the group's commits, not one copy's positions: the copy that owns
    `T_{i+1}[q]` need not be the one that owned the `T_i` partitions with the same keys."""
    storage = source.composite.storage_topics[idx]
    tps = [(storage.name, p) for p in range(storage.partitions)]
    committed = committed_offsets(settings.bootstrap, settings.name, tps)
    ends = broker_for(settings).end_offsets(tps)
    return {idx: {p: done >= end for (_, p), done, end in zip(tps, committed, ends, strict=True)}}


def ensure_topics(settings: ConsumerSettings, source: Source | None = None) -> int:
    """Create the consumer's own topics (the partition count of the source, or of a composite
    source's first storage topic); the count."""
    admin = KafkaAdmin(settings.bootstrap, settings.replication_factor)
    if source is None:
        source = resolve_source(settings)
    partitions = source.lanes
    compacted = {"cleanup.policy": "compact"}
    short = {"retention.ms": str(_QUESTIONS_KEPT_MS)}
    admin.ensure(
        [
            TopicSpec(settings.retry_topic, partitions),
            TopicSpec(settings.dlq_topic, partitions),
            TopicSpec(settings.state_topic, partitions, compacted),
            TopicSpec(settings.members_topic, 1, compacted),
            TopicSpec(settings.requests_topic, partitions, short),
            TopicSpec(settings.replies_topic, 1, short),
        ]
    )
    found = admin.topics()
    for own in (settings.retry_topic, settings.dlq_topic, settings.state_topic, settings.requests_topic):
        if found.get(own) != partitions:
            raise ConfigError(
                f"{own} has {found.get(own)} partitions, {source.composite.storage_topics[0].name} has "
                f"{partitions}: they must match"
            )
    return partitions
