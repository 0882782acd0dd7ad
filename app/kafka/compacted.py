"""A one-partition compacted topic used as a shared registry (composite-topic definitions,
subscription definitions): every process reads the same log, the last record per key wins and a
tombstone deletes. `CompactedLog.read_new` hands the records written since the last call to the
caller's `apply`, in offset order; `write` answers once the broker confirmed the record."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import BrokerPort, FetchGuard, confluent_seek
from app.kafka.consuming import partition_reader
from app.kafka.writing import produce_confirmed

__all__ = ["Apply", "ApplyAt", "CompactedLog"]

Apply = Callable[[str, bytes | None], None]  # (key, value or None for a tombstone)
ApplyAt = Callable[[int, str, bytes | None], None]  # (offset, key, value or None)


class CompactedLog:
    def __init__(
        self, broker: BrokerPort, topic: str, *, reader_group: str, point: str, replication_factor: int
    ) -> None:
        self.broker, self.bootstrap, self.topic = broker, broker.bootstrap, topic
        self.admin = KafkaAdmin(broker.bootstrap, replication_factor)
        self.lock = threading.Lock()  # hold it around read_new and the reads of what it applied
        self._reader_group, self._write_point = reader_group, point
        self._position = 0
        self._consumer: Consumer | None = None
        self._guard: FetchGuard | None = None
        self._created = False

    def _create(self) -> None:
        """The topic, compacted, before the first read or write (a write to a topic that does not
        exist would have the broker create it with its defaults, or not at all)."""
        if not self._created:
            self.admin.create([TopicSpec(self.topic, 1, {"cleanup.policy": "compact"})])
            self._created = True

    def _ensure(self) -> tuple[Consumer, FetchGuard]:
        if self._consumer is None or self._guard is None:
            self._create()
            self._consumer = partition_reader(self.bootstrap, self._reader_group, partition_eof=True)
            self._consumer.assign([TopicPartition(self.topic, 0, self._position)])
            self._guard = self.broker.fetch_guard(confluent_seek(self._consumer), compacted=True)
            self._guard.expect(self.topic, 0, self._position)
        return self._consumer, self._guard

    def read_new(self, apply: Apply, timeout_s: float = 10.0) -> None:
        """Apply every record written since the last call; ServiceUnavailable past `timeout_s`.
        Call it with `lock` held."""
        self.read_new_at(lambda _offset, key, value: apply(key, value), timeout_s)

    def read_new_at(self, apply: ApplyAt, timeout_s: float = 10.0) -> None:
        """`read_new`, handing each record's offset too."""
        consumer, guard = self._ensure()
        # The broker port's end: the embedded broker's listed end lags behind a confirmed write
        # at times (by one record, seen on its S3 engine), and a read stopping there would miss
        # the newest definition until the next write. On that broker the port probes with a
        # consumer of its own (about 8 ms a read here, against 0.5 ms for the listed end); on
        # Apache Kafka it is the same ListOffsets request as before.
        high = self.broker.end_offsets([(self.topic, 0)], timeout_s)[0]
        deadline = time.monotonic() + timeout_s
        while self._position < high:
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"{self.topic}[0] offset={self._position}: registry read timed out")
            polled = guard.admit(consumer.consume(1, 0.2))
            if not polled:
                continue
            msg = polled[0]
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    # The listed end may under-report (the embedded broker's does): the end of the
                    # partition is the true end. (Elsewhere the two agree and this changes nothing.)
                    high = max(high, msg.offset())
                    if self._position >= high:
                        break
                    continue
                raise ServiceUnavailable(f"{self.topic}[0]: {msg.error()}")
            self._position = msg.offset() + 1
            high = max(high, self._position)
            apply(msg.offset(), msg.key().decode(), msg.value())

    def write(self, key: str, value: bytes | None, *, point: str | None = None) -> None:
        """One record (None: a tombstone), confirmed by the broker; ServiceUnavailable otherwise.
        `point`: the crash point of this write, when it is not the log's own."""
        self._create()
        produce_confirmed(self.bootstrap, self.topic, key.encode(), value, point=point or self._write_point)

    def close(self) -> None:
        with self.lock:  # not under a read still running in another thread
            if self._consumer is not None:
                self._consumer.close()
            self._consumer = self._guard = None
