"""Pipeline sources over Kafka: a composite topic (the Varadhi design's storage topics: every
partition of every storage topic, new storage topics picked up at the metadata refresh) and a
plain Kafka topic (every partition, partitions added later picked up at the same refresh)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from confluent_kafka import KafkaError, TopicPartition

from app.composite.store import MetadataStore
from app.kafka.broker import FetchGuard, broker_for, confluent_seek
from app.kafka.consuming import partition_reader
from app.pipeline.errors import SourceUnavailable
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState
from app.pipeline.source_kit import Threaded, now_ms
from app.settings import Settings

__all__ = ["CompositeSource", "KafkaTopicSource"]


class CompositeSource(Threaded):
    """Every partition of every storage topic of a composite topic (new storage topics are picked
    up at the metadata refresh). Payload JSON objects become the data; other payloads `{"value": ...}`.
    Positions are next offsets per `storage[partition]`; the document key is `id_field` when present."""

    def __init__(
        self, settings: Settings, options: Mapping[str, Any], batch_size: int, wait_s: float
    ) -> None:
        super().__init__()
        self.settings = settings
        self.name = str(options["topic"])
        self.namespace = str(options.get("namespace") or self.name)
        self.id_field = str(options.get("id_field", "id"))
        self.group_field = options.get("group_field")
        self.start_latest = options.get("start", "earliest") == "latest"
        self.batch_size = batch_size
        self.wait_s = max(wait_s, 0.05)
        self._consumer: Any = None
        self._assigned: set[tuple[str, int]] = set()
        self._starts: dict[str, int] = {}  # where partitions without a position began (start=latest)
        self._guard: FetchGuard | None = None  # reads back records the client skipped
        # PIPELINE_EXIT_WHEN_IDLE: the read is done once every partition reached the end it had
        # when the read began (`storage[partition]` -> end; `_reached`: the next offset read).
        self._until: dict[str, int] | None = None
        self._reached: dict[str, int] = {}

    def _reassign(self, positions: Mapping[str, Any]) -> None:
        """Back to the positions of the entries the log confirmed. A read that ended (a refused
        append) left the consumer past entries that never reached the log; they are read again."""
        if self._consumer is not None and self._assigned:
            self._consumer.unassign()
            self._assigned.clear()
        self._assign_new(positions)

    def _partitions(self) -> list[tuple[str, int]]:
        """Every partition to read, as (Kafka topic, partition)."""
        store = MetadataStore.of(self.settings)
        try:
            topic = store.get(self.name)
        finally:
            store.close()
        return [(storage.name, p) for storage in topic.storage_topics for p in range(storage.partitions)]

    def _assign_new(self, positions: Mapping[str, Any]) -> None:
        if self._consumer is None:
            self._consumer = partition_reader(
                self.settings.bootstrap,
                f"hubstream-pipeline-source-{self.name}",
                partition_eof=True,  # the guard checks where each partition ends, too
                overrides={"fetch.wait.max.ms": 50},
            )
            self._guard = broker_for(self.settings).fetch_guard(confluent_seek(self._consumer))
        unplaced = [tp for tp in self._partitions() if tp not in self._assigned]

        def known(tp: tuple[str, int]) -> Any:
            key = _where(tp)
            return positions.get(key, self._starts.get(key))

        if self.start_latest:
            # Pin "latest" to an offset, so that a read started again begins at the same place.
            latest = [tp for tp in unplaced if known(tp) is None]
            if latest:
                ends = broker_for(self.settings).end_offsets(latest)
                self._starts.update((_where(tp), end) for tp, end in zip(latest, ends, strict=True))
        new = []
        for tp in unplaced:
            start = known(tp)
            # Offset 0, not OFFSET_BEGINNING: the embedded broker can answer "the beginning" with a
            # later offset (app.kafka.embedded); where retention took 0, the client's reset finds it.
            new.append(TopicPartition(*tp, int(start) if start is not None else 0))
            self._reached[_where(tp)] = max(self._reached.get(_where(tp), 0), new[-1].offset)
            self._assigned.add(tp)
        if new:
            assert self._guard is not None
            self._guard.expect_all(new)
            self._consumer.incremental_assign(new)

    def _poll(self) -> list[NewEntry]:

        out = []
        assert self._guard is not None
        msg: Any
        for msg in self._guard.admit(self._consumer.consume(self.batch_size, self.wait_s)):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:  # carries the next offset
                    where = _where((msg.topic(), msg.partition()))
                    self._reached[where] = max(self._reached.get(where, 0), msg.offset())
                    continue
                raise OSError(f"{msg.topic()}[{msg.partition()}]: {msg.error()}")
            where = _where((msg.topic(), msg.partition()))
            self._reached[where] = max(self._reached.get(where, 0), msg.offset() + 1)
            try:
                payload = orjson.loads(msg.value() or b"null")
            except orjson.JSONDecodeError:
                payload = (msg.value() or b"").decode("utf-8", "replace")
            data = payload if type(payload) is dict else {"value": payload}  # (fresh from loads: ours)
            if self.group_field:
                data[str(self.group_field)] = (msg.key() or b"").decode("utf-8", "replace")
            doc_key = str(data[self.id_field]) if self.id_field in data else f"{where}@{msg.offset()}"
            _, ts = msg.timestamp()
            out.append(
                NewEntry(
                    Message(Op.INSERT, ts if ts > 0 else now_ms(), self.namespace, data),
                    Mode.SYNC,
                    {where: msg.offset() + 1},
                    doc_key,
                )
            )
        return out

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        positions = dict(resume.get(self.namespace, ReaderState()).position)
        await self._run(self._reassign, positions)
        if self.settings.pipeline_exit_when_idle and self._until is None:
            assigned = sorted(self._assigned)
            ends = await asyncio.to_thread(broker_for(self.settings).end_offsets, assigned)
            self._until = {_where(tp): end for tp, end in zip(assigned, ends, strict=True)}
        refresh_at = time.monotonic() + self.settings.metadata_refresh_s
        while True:
            if time.monotonic() >= refresh_at:
                await self._run(self._assign_new, positions)
                refresh_at = time.monotonic() + self.settings.metadata_refresh_s
            batch = await self._run(self._poll)
            if batch:  # (positions only place partitions assigned later: theirs are not in a batch yet)
                yield batch
            if self._until is not None and all(
                self._reached.get(w, 0) >= end for w, end in self._until.items()
            ):
                return  # caught up with the end it saw at start

    async def close(self) -> None:
        if self._consumer is not None:
            await self._run(self._consumer.close)
        await super().close()


class KafkaTopicSource(CompositeSource):
    """Every partition of a plain Kafka topic, read as a composite topic's storage topics are:
    positions are next offsets per `topic[partition]`, the record key can go into `group_field`,
    partitions added to the topic are picked up at the metadata refresh."""

    def _partitions(self) -> list[tuple[str, int]]:
        listed = self._consumer.list_topics(self.name, timeout=10.0).topics.get(self.name)
        if listed is None or listed.error is not None:
            why = listed.error.str() if listed is not None and listed.error is not None else "not listed"
            raise SourceUnavailable(f"Kafka topic {self.name!r} cannot be read: {why}")
        return [(self.name, p) for p in sorted(listed.partitions)]


def _where(tp: tuple[str, int]) -> str:
    """A storage partition as the reader's position key: `storage[partition]`."""
    return f"{tp[0]}[{tp[1]}]"
