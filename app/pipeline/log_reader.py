"""Reading the Kafka commit log by entry number (app/pipeline/log_records.py says how records are
numbered): a cursor for writers, a range for operators and the CLI, and the log's end.

A read from entry number N first finds the record holding N by binary search over the Kafka
offsets (a probe reads one record's headers), then reads on from there, leaving out the entries
below N. A record that is not a log record is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from app.errors import InvalidInput, ServiceUnavailable
from app.kafka.broker import BrokerPort, confluent_seek
from app.kafka.consuming import partition_reader
from app.pipeline.log_records import (
    Placed,
    decode_record,
    invalid_entries,
    locate,
    record_numbers,
    record_seq,
)
from app.pipeline.model import LogEntry

__all__ = ["KafkaCursor", "LogReader", "log_end", "read_log_range"]

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0
RECORDS_PER_CONSUME = 16  # log records hold up to a batch of entries each
# Records read back from the end to find the last log record: the last one, as a rule (a bulk
# record can hold up to a megabyte); the window grows eightfold while none of them is numbered.
END_WINDOW = 1


class LogReader:
    """One consumer over the commit log's partition, reading entries from a number on (blocking:
    run it on a thread of its own)."""

    def __init__(self, broker: BrokerPort, topic: str, group_id: str) -> None:
        self.broker = broker
        self.bootstrap = bootstrap = broker.bootstrap
        self.topic = topic
        self._tp = (topic, 0)
        self._consumer: Consumer = partition_reader(
            bootstrap, group_id, reset="earliest", partition_eof=True, overrides={"fetch.wait.max.ms": 50}
        )
        self._guard = broker.fetch_guard(confluent_seek(self._consumer), compacted=True)
        self._pending: deque[LogEntry] = deque()
        self.position = 0  # the next entry number to hand out
        self._located = False

    def bounds(self) -> tuple[int, int]:
        """Kafka's (low, high) watermarks of the log partition, the high one as a fetch reports it."""
        (low,) = self.broker.start_offsets([self._tp], PROBE_TIMEOUT_S)
        (high,) = self.broker.end_offsets([self._tp], PROBE_TIMEOUT_S)
        return low, high

    def seek(self, number: int, bounds: tuple[int, int] | None = None) -> None:
        """Read entries numbered `number` and above next (`bounds`: the watermarks, if just read)."""
        low, high = bounds or self.bounds()
        start = low if number <= 0 else locate(number, low, high, lambda k: self._probe(k, high))
        self._place(start, checked=True)
        self._pending.clear()
        self.position = max(number, 0)
        self._located = True

    def _probe(self, kafka_offset: int, high: int) -> Placed | None:
        """The first log record at `kafka_offset` or after it, before `high`."""
        for msg in self._records(kafka_offset, high):
            numbers = record_numbers(msg.headers())
            if numbers is not None:
                return Placed(msg.offset(), numbers[0])
        return None

    def _records(self, kafka_offset: int, high: int) -> Any:
        """The records from `kafka_offset` up to `high` (exclusive), read with a deadline."""
        self._place(kafka_offset, checked=False)  # a probe: a compaction gap here is expected
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        at = kafka_offset
        while at < high:
            if time.monotonic() > deadline:
                raise ServiceUnavailable(
                    f"{self.topic}[0]: no record at offset {at} after {PROBE_TIMEOUT_S:.0f} s"
                )
            for msg in self._fetched(0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise ServiceUnavailable(f"{self.topic}[0]: {msg.error()}")
                if msg.offset() >= high:
                    return
                at = msg.offset() + 1
                yield msg

    def _place(self, kafka_offset: int, *, checked: bool) -> None:
        self._consumer.assign([TopicPartition(self.topic, 0, kafka_offset)])
        if checked:
            self._guard.expect(self.topic, 0, kafka_offset)
        else:
            self._guard.forget([self._tp])

    def end(self) -> int:
        """The number the next appended entry gets: after the last log record's entries (0 when the
        log holds none)."""
        return self.end_and_high()[0]

    def end_and_high(self, bounds: tuple[int, int] | None = None) -> tuple[int, int]:
        """The log's end entry number and Kafka high watermark (`bounds`: the watermarks, if just read)."""
        low, high = bounds or self.bounds()
        window = END_WINDOW
        while True:
            start = max(low, high - window)
            last = None
            for msg in self._records(start, high):
                numbers = record_numbers(msg.headers())
                if numbers is not None:
                    last = numbers
            if last is not None:
                return last[0] + last[1], high
            if start == low:
                return 0, high
            window *= 8

    def read(self, max_count: int, wait_s: float) -> list[LogEntry]:
        """Up to max_count entries from `position` on; [] when none arrived within wait_s."""
        if not self._located:
            self.seek(self.position)
        if len(self._pending) < max_count:
            messages = self._consume(1, 0 if self._pending else wait_s)
            while messages:  # every record consumed is taken: the consumer is past it
                for msg in messages:
                    self._take(msg)
                if len(self._pending) >= max_count:
                    break
                messages = self._consume(RECORDS_PER_CONSUME, 0)
        out = [self._pending.popleft() for _ in range(min(max_count, len(self._pending)))]
        if out:
            self.position = out[-1].offset + 1
        return out

    def _fetched(self, wait_s: float) -> Any:
        """The next record (waiting up to wait_s for it), then those already fetched after it (for
        scans that assign the consumer anew each time: records not iterated are dropped)."""
        messages = self._consume(1, wait_s)
        while messages:
            yield from messages
            messages = self._consume(RECORDS_PER_CONSUME, 0)

    def _consume(self, count: int, wait_s: float) -> list[Any]:
        return self._guard.admit(self._consumer.consume(count, wait_s))

    def _take(self, msg: Any) -> None:
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return
            raise ServiceUnavailable(f"{self.topic}[0]: {msg.error()}")
        numbers = record_numbers(msg.headers())
        if numbers is None:
            log.warning("%s[0] offset=%d: skipped, not a commit-log record", self.topic, msg.offset())
            return
        first, count = numbers
        try:
            entries = decode_record(msg.key(), first, count, msg.value(), record_seq(msg.headers()))
        except InvalidInput as exc:
            log.warning(
                "%s[0] offset=%d: entries %d+%d unreadable: %s", self.topic, msg.offset(), first, count, exc
            )
            entries = invalid_entries(first, count, str(exc))
        floor = self._pending[-1].offset + 1 if self._pending else self.position
        self._pending.extend(entry for entry in entries if entry.offset >= floor)

    def close(self) -> None:
        self._consumer.close()


class KafkaCursor:
    """A writer's cursor over the commit log from entry `start` (no group: positions are ours)."""

    def __init__(self, broker: BrokerPort, topic: str, start: int) -> None:
        self.topic = topic
        self._reader = LogReader(broker, topic, f"hubstream-pipeline-cursor-{topic}")
        self._reader.position = max(start, 0)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"cursor-{topic}")

    async def next_batch(self, max_count: int, wait_s: float) -> list[LogEntry]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._reader.read, max_count, wait_s)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._reader.close)
        self._executor.shutdown(wait=False)


def read_log_range(
    broker: BrokerPort, topic: str, first: int, last: int, timeout_s: float = 10.0
) -> list[LogEntry]:
    """Entries with first <= number <= last that the log holds (compacted ones are absent)."""
    reader = LogReader(broker, topic, "hubstream-pipeline-cli")
    try:
        bounds = reader.bounds()
        end, _ = reader.end_and_high(bounds)
        reader.seek(first, bounds)
        out: list[LogEntry] = []
        deadline = time.monotonic() + timeout_s
        while reader.position <= last and reader.position < end:
            if time.monotonic() > deadline:
                raise ServiceUnavailable(
                    f"{topic}: entries {first}..{last} not read within {timeout_s:.0f} s"
                )
            out.extend(entry for entry in reader.read(1000, 0.5) if entry.offset <= last)
        return out
    finally:
        reader.close()


def log_end(broker: BrokerPort, topic: str) -> int:
    """The commit log's end: the number its next entry gets."""
    reader = LogReader(broker, topic, "hubstream-pipeline-cli")
    try:
        return reader.end()
    finally:
        reader.close()
