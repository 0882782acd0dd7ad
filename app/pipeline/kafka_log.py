"""The commit log as a one-partition Kafka topic (offsets = the seed's commit-log ids).

Topic configuration (created on first run): `cleanup.policy=compact`, `segment.bytes=1 GiB`
(the seed's 1 GB log size: only closed segments are compacted), `min.compaction.lag.ms`
(default 7 days) so an entry stays uncompacted at least that long. Kafka cannot bound
compaction by consumer offsets; the lag guard plays the seed's "up to the earliest writer
offset" role. Record keys are `namespace` + NUL + document key, so compaction keeps the
latest version of every document (at least one record per namespace, as the seed asks).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from app.crashpoints import crash_point
from app.errors import InvalidInput, ServiceUnavailable
from app.kafka.admin import KafkaAdmin, TopicSpec, true_end_offsets
from app.kafka.consuming import partition_reader
from app.kafka.producing import AsyncProducer, produce_failed, settle
from app.kafka.reading import read_from
from app.pipeline.model import LogEntry, Mode, NewEntry, Op, decode_entry, encode_entry, record_key
from app.pipeline.model import Message as PipelineMessage

__all__ = [
    "COMMIT_LOG_CONFIG",
    "BatchDelivery",
    "KafkaCommitLog",
    "KafkaCursor",
    "PipelineTopics",
    "read_log_range",
]

log = logging.getLogger(__name__)

SEGMENT_BYTES = 1 << 30
MIN_COMPACTION_LAG_MS = 7 * 24 * 3600 * 1000
APPEND_TIMEOUT_MS = 60_000  # a record the broker has not confirmed by then fails its batch
COMMIT_LOG_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(SEGMENT_BYTES),
    "min.compaction.lag.ms": str(MIN_COMPACTION_LAG_MS),
}


@dataclass(frozen=True, slots=True)
class PipelineTopics:
    """Kafka names derived from a pipeline name (the CLI finds a pipeline's state by name only)."""

    name: str
    app_id: str

    @classmethod
    def of(cls, name: str, base_app_id: str) -> PipelineTopics:
        """The pipeline's own Faust app id is `<HUBSTREAM_APP_ID>-pipeline-<name>`."""
        return cls(name, f"{base_app_id}-pipeline-{name}")

    @property
    def log(self) -> str:
        return f"hubstream.pipeline.{self.name}.log"

    @property
    def control(self) -> str:
        return f"hubstream.pipeline.{self.name}.control"

    @property
    def dlq(self) -> str:
        """Dead letters of the writers with `errors_tolerance: all`."""
        return f"hubstream.pipeline.{self.name}.dlq"

    @property
    def changelog(self) -> str:
        return f"{self.app_id}-offsets-changelog"


def _invalid_entry(offset: int, reason: str) -> LogEntry:
    """A record that is not a log entry becomes a command every writer acknowledges without writing."""
    message = PipelineMessage(Op.COMMAND, 0, "__invalid__", {"invalid": reason})
    return LogEntry(offset, 0, Mode.SYNC, "__invalid__", message)


def _decode(topic: str, msg: Any) -> LogEntry:
    try:
        entry = decode_entry(msg.offset(), msg.value())
    except InvalidInput as exc:
        log.warning("%s[0] offset=%d: skipped, not a log entry: %s", topic, msg.offset(), exc)
        return _invalid_entry(msg.offset(), str(exc))
    entry.record_key = msg.key()
    return entry


class BatchDelivery:
    """The delivery reports of one appended batch (called on the producer's poll thread). Only the
    batch's first and last record are reported (`AsyncProducer.produce_run`): the log is one
    partition written only by this pipeline's idempotent producer, so the batch landed whole exactly
    when its ends landed `count - 1` offsets apart, and its offsets are the run between them. Any
    error, or ends further apart (a record lost in between, another producer writing), fails it."""

    __slots__ = ("_count", "_ends", "_loop", "_topic", "confirmed")

    def __init__(self, topic: str, count: int, loop: asyncio.AbstractEventLoop) -> None:
        self._topic = topic
        self._count = count
        self._loop = loop
        self._ends: list[int] = []  # offsets reported so far (the first and the last record's)
        self.confirmed: asyncio.Future[list[int]] = loop.create_future()
        if count == 0:
            self.confirmed.set_result([])

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._fail(produce_failed(f"{self._topic}[0]", err))
        elif msg.topic() != self._topic or msg.partition() != 0:
            self._fail(
                ServiceUnavailable(f"{self._topic}[0]: delivery report for {msg.topic()}[{msg.partition()}]")
            )
        elif self._count > 0:
            self._ends.append(msg.offset())
            if self._count == 1 or len(self._ends) == 2:
                self._settle()

    def _settle(self) -> None:
        first, last = min(self._ends), max(self._ends)
        if last - first != self._count - 1:
            self._fail(
                ServiceUnavailable(
                    f"{self._topic}[0]: a batch of {self._count} records landed at offsets {first}..{last}: "
                    "a record is missing, or another producer writes this commit log"
                )
            )
        else:
            self._loop.call_soon_threadsafe(settle, self.confirmed, list(range(first, last + 1)))

    def _fail(self, error: Exception) -> None:
        self._count = -1  # never complete with offsets
        self._loop.call_soon_threadsafe(settle, self.confirmed, error)


class KafkaCommitLog:
    def __init__(self, bootstrap: str, topic: str, max_message_bytes: int = 1_048_576) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._producer: AsyncProducer | None = None
        self._max_message_bytes = max_message_bytes
        self._starting = asyncio.Lock()  # one batch handed over at a time: produce order = call order

    def ensure_topic(self, replication_factor: int = 1) -> None:
        KafkaAdmin(self.bootstrap, replication_factor).create([TopicSpec(self.topic, 1, COMMIT_LOG_CONFIG)])

    def _get_producer(self) -> AsyncProducer:
        """Created on the first append: cursors-only users (CLI, writer drains) start no producer."""
        if self._producer is None:
            self._producer = AsyncProducer(
                self.bootstrap,
                name=f"log-{self.topic}",
                **{
                    "batch.num.messages": 10000,
                    "message.max.bytes": max(self._max_message_bytes + 65536, 1_000_000),
                    "message.timeout.ms": APPEND_TIMEOUT_MS,
                },
            )
        return self._producer

    async def prepare_append(self) -> None:
        """Start the producer: it connects and gets its producer id while the reader starts."""
        self._get_producer()

    async def start_append(self, entries: Sequence[NewEntry]) -> asyncio.Future[list[int]]:
        """Produce the batch now; the future gives its offsets once the broker confirmed every record."""
        async with self._starting:
            crash_point("pipeline.log.append")
            delivery = BatchDelivery(self.topic, len(entries), asyncio.get_running_loop())
            records = [(record_key(entry), encode_entry(entry)) for entry in entries]
            try:
                await self._get_producer().produce_run(self.topic, 0, records, delivery)
            except BaseException:
                delivery.confirmed.cancel()  # nobody awaits it; the reports of queued records are ignored
                raise
            return delivery.confirmed

    async def end_offset(self) -> int:
        ends = await asyncio.to_thread(true_end_offsets, self.bootstrap, [(self.topic, 0)])
        return ends[0]

    def cursor(self, start: int) -> KafkaCursor:
        return KafkaCursor(self.bootstrap, self.topic, start)

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()


class KafkaCursor:
    """Reads the commit log from `start` with its own consumer (no group: positions are ours)."""

    def __init__(self, bootstrap: str, topic: str, start: int) -> None:
        self.topic = topic
        self._consumer = partition_reader(
            bootstrap,
            f"hubstream-pipeline-cursor-{topic}",
            reset="earliest",
            overrides={"fetch.wait.max.ms": 50},
        )
        self._consumer.assign([TopicPartition(topic, 0, max(start, 0))])
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"cursor-{topic}")

    def _next_blocking(self, max_count: int, wait_s: float) -> list[LogEntry]:
        out: list[LogEntry] = []
        msg: Any
        for msg in self._consumer.consume(max_count, wait_s):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise ServiceUnavailable(f"{self.topic}[0]: {msg.error()}")
            out.append(_decode(self.topic, msg))
        return out

    async def next_batch(self, max_count: int, wait_s: float) -> list[LogEntry]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._next_blocking, max_count, wait_s)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._consumer.close)
        self._executor.shutdown(wait=False)


def read_log_range(
    bootstrap: str, topic: str, first: int, last: int, timeout_s: float = 10.0
) -> list[LogEntry]:
    """Entries with first <= offset <= last (compacted-away offsets are simply absent)."""
    tp = (topic, 0)
    messages = read_from(
        bootstrap, {tp: first}, stops={tp: last + 1}, timeout_s=timeout_s, group_id="hubstream-pipeline-cli"
    )
    return [_decode(topic, msg) for msg in messages]
