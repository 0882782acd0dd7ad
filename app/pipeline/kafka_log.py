"""The commit log as a one-partition Kafka topic, appended in bulk: one record per run of entries
of a namespace, the entries numbered by the log (app/pipeline/log_records.py); reading is in
app/pipeline/log_reader.py.

Topic configuration (created on first run): `cleanup.policy=compact`, `segment.bytes=1 GiB`
(the seed's 1 GB log size: only closed segments are compacted), `min.compaction.lag.ms`
(default 7 days) so a record stays uncompacted at least that long. Kafka cannot bound
compaction by consumer offsets; the lag guard plays the seed's "up to the earliest writer
offset" role. Record keys are namespaces, so compaction keeps each namespace's latest record
(at least one message per namespace, as the seed asks).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from app.crashpoints import InjectedFault, crash_point
from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import BrokerPort
from app.kafka.producing import AsyncProducer, produce_failed, settle
from app.pipeline.errors import EntryTooLarge
from app.pipeline.log_reader import KafkaCursor, LogReader, log_end, read_log_range
from app.pipeline.log_records import encode_records
from app.pipeline.model import NewEntry

__all__ = [
    "COMMIT_LOG_CONFIG",
    "BatchDelivery",
    "Chain",
    "KafkaCommitLog",
    "KafkaCursor",
    "PipelineTopics",
    "log_end",
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


class Chain:
    """Where this process's last confirmed log record ended in Kafka (touched on the producer's poll
    thread; set on the event loop only while nothing is in flight). Another producer's record in
    between means two processes append to one log: their entry numbers would collide."""

    __slots__ = ("end",)

    def __init__(self) -> None:
        self.end: int | None = None


class BatchDelivery:
    """The delivery reports of one appended batch's records (called on the producer's poll thread,
    in produce order). The batch is confirmed, with its entry numbers, once every record is, each
    right after the one before in the partition (and the first right after the previous batch's
    last); any error or gap fails it."""

    __slots__ = ("_chain", "_first", "_loop", "_records", "_reported", "_topic", "confirmed", "count")

    def __init__(
        self, topic: str, first: int, count: int, records: int, chain: Chain, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._topic = topic
        self._first = first
        self.count = count
        self._records = records
        self._chain = chain
        self._loop = loop
        self._reported = 0
        self.confirmed: asyncio.Future[list[int]] = loop.create_future()
        if records == 0:
            self.confirmed.set_result([])

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if self._reported < 0:
            return
        if err is not None:
            self._fail(produce_failed(f"{self._topic}[0]", err))
            return
        if msg.topic() != self._topic or msg.partition() != 0:
            self._fail(
                ServiceUnavailable(f"{self._topic}[0]: delivery report for {msg.topic()}[{msg.partition()}]")
            )
            return
        offset = msg.offset()
        expected = self._chain.end
        if expected is not None and offset != expected:
            self._fail(
                ServiceUnavailable(
                    f"{self._topic}[0]: record at offset {offset}, {expected} expected: a record is missing,"
                    " or another producer writes this commit log"
                )
            )
            return
        self._chain.end = offset + 1
        self._reported += 1
        if self._reported < self._records:
            try:  # part of the batch is in the log, the rest may or may not follow
                crash_point("pipeline.log.record_confirmed")
            except InjectedFault as fault:
                self._fail(fault)
                return
        if self._reported == self._records:
            numbers = list(range(self._first, self._first + self.count))
            self._loop.call_soon_threadsafe(settle, self.confirmed, numbers)

    def _fail(self, error: Exception) -> None:
        self._reported = -1  # never complete
        self._chain.end = None  # unknown until the appender reads the log's end again
        self._loop.call_soon_threadsafe(settle, self.confirmed, error)


class KafkaCommitLog:
    def __init__(self, broker: BrokerPort, topic: str, max_message_bytes: int = 1_048_576) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.topic = topic
        self._producer: AsyncProducer | None = None
        self._max_message_bytes = max_message_bytes
        self._starting = asyncio.Lock()  # one batch handed over at a time: produce order = call order
        self._next: int | None = None  # the next entry number; None: read the log's end first
        self._chain = Chain()

    def ensure_topic(self, replication_factor: int = 1) -> None:
        KafkaAdmin(self.bootstrap, replication_factor).create([TopicSpec(self.topic, 1, COMMIT_LOG_CONFIG)])

    def _get_producer(self) -> AsyncProducer:
        """Created on the first append: cursors-only users (CLI, writer drains) start no producer."""
        if self._producer is None:
            self._producer = AsyncProducer(
                self.bootstrap,
                name=f"log-{self.topic}",
                **{
                    "message.max.bytes": max(self._max_message_bytes + 65536, 1_000_000),
                    "message.timeout.ms": APPEND_TIMEOUT_MS,
                },
            )
        return self._producer

    async def prepare_append(self) -> None:
        """Start the producer (it connects and gets its producer id) and read where the log ends."""
        self._get_producer()
        async with self._starting:
            if self._next is None:
                await self._sync()

    async def _sync(self) -> None:
        """Number on from the log's end, once every record handed over is confirmed or failed."""
        await self._get_producer().flush()
        reader = LogReader(self.broker, self.topic, f"hubstream-pipeline-append-{self.topic}")
        try:
            self._next, self._chain.end = await asyncio.to_thread(reader.end_and_high)
        finally:
            await asyncio.to_thread(reader.close)

    async def start_append(self, entries: Sequence[NewEntry]) -> asyncio.Future[list[int]]:
        """Produce the batch now; the future gives its entry numbers once the broker confirmed it.
        After any failure the next append first reads the log's end again."""
        async with self._starting:
            crash_point("pipeline.log.append")
            if self._next is None:
                await self._sync()
            assert self._next is not None
            first = self._next
            records = encode_records(entries, first, self._max_message_bytes)
            for record in records:  # a record of one entry is not split further: refused before sending
                if record.count == 1 and len(record.value) > self._max_message_bytes:
                    raise EntryTooLarge(record.first - first, len(record.value), self._max_message_bytes)
            delivery = BatchDelivery(
                self.topic, first, len(entries), len(records), self._chain, asyncio.get_running_loop()
            )
            self._next = first + len(entries)
            delivery.confirmed.add_done_callback(self._settled)
            try:
                await self._get_producer().produce_all(
                    self.topic, 0, [(r.key, r.value, r.headers) for r in records], delivery
                )
            except BaseException:
                self._next = None
                delivery.confirmed.cancel()  # nobody awaits it; the reports of queued records are ignored
                raise
            return delivery.confirmed

    def _settled(self, confirmed: asyncio.Future[list[int]]) -> None:
        if confirmed.cancelled() or confirmed.exception() is not None:
            self._next = None

    async def end_offset(self) -> int:
        return await asyncio.to_thread(log_end, self.broker, self.topic)

    def cursor(self, start: int) -> KafkaCursor:
        return KafkaCursor(self.broker, self.topic, start)

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
