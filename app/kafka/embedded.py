"""The embedded broker adapter: hubstream's work-arounds for the embedded Tansu broker's answers.

- Its ListOffsets(latest) is the base offset of the last record batch + 1: the true end is the
  high watermark of a fetch response (`_true_end_offsets`).
- Its ListOffsets(earliest) is the batch *written* first, which concurrent producers can make a
  later one: the true start is found by reading from 0 (`_true_start_offsets`), and a reader's
  fetches are checked by a `SequenceGuard` (app.kafka.sequence).
- Faust's table recovery asks ListOffsets for both: it is given these answers instead
  (app.kafka.faust_compat), and a recovered table may still lack its changelog's newest records.

On Apache Kafka these answers equal ListOffsets' but cost a probe consumer each: there the
standard adapter (app.kafka.standard) answers. Only `EmbeddedBrokerQuirks` is public here; the
port (app.kafka.broker) hands it out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from app.errors import ServiceUnavailable
from app.kafka.consuming import Reset, partition_reader
from app.kafka.sequence import SequenceGuard

__all__ = ["EmbeddedBrokerQuirks", "ProbeConsumer"]

START_RECHECK_S = 0.25
Partition = tuple[str, int]


class ProbeConsumer(Protocol):
    """The confluent-kafka consumer calls the probes make."""

    def assign(self, partitions: list[TopicPartition], /) -> None: ...

    def poll(self, timeout: float = -1, /) -> Message | None: ...

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]: ...

    def close(self) -> None: ...


OpenProbe = Callable[[Reset, Mapping[str, Any]], ProbeConsumer]  # (reset, librdkafka overrides)


class EmbeddedBrokerQuirks:
    """The embedded broker at `bootstrap` (`open_probe`: builds the probe consumers, a
    partition reader by default)."""

    kind: Literal["embedded"] = "embedded"
    recovery_misses_newest = True

    def __init__(self, bootstrap: str, open_probe: OpenProbe | None = None) -> None:
        self.bootstrap = bootstrap

        def reader(reset: Reset, overrides: Mapping[str, Any]) -> ProbeConsumer:
            consumer: ProbeConsumer = partition_reader(
                bootstrap, "hubstream-offsets", reset=reset, partition_eof=True, overrides=overrides
            )
            return consumer

        self._open_probe = open_probe or reader

    def end_offsets(self, partitions: Sequence[Partition], timeout_s: float = 10.0) -> list[int]:
        try:
            return _true_end_offsets(self._open_probe, list(partitions), timeout_s)
        except KafkaException as exc:  # the broker is away (restarting): the port's answer
            raise ServiceUnavailable(f"end offsets of {sorted(partitions)} not known: {exc}") from exc

    def start_offsets(self, partitions: Sequence[Partition], timeout_s: float = 10.0) -> list[int]:
        try:
            return _true_start_offsets(self._open_probe, list(partitions), timeout_s)
        except KafkaException as exc:
            raise ServiceUnavailable(f"start offsets of {sorted(partitions)} not known: {exc}") from exc

    def fetch_guard(self, seek: Callable[[str, int, int], None], *, compacted: bool = False) -> SequenceGuard:
        return SequenceGuard(seek, compacted=compacted)

    def patch_faust_recovery(self) -> None:
        from app.kafka.faust_compat import install_recovery_offsets  # Faust: workers only

        install_recovery_offsets(self.end_offsets, self.start_offsets)


def _true_start_offsets(open_probe: OpenProbe, partitions: list[Partition], timeout_s: float) -> list[int]:
    """The first offset each partition holds (its end when it holds none), found by reading from 0:
    an offset the log no longer holds resets to its first. Not ListOffsets(earliest): the embedded
    broker answers it with the batch *written* first, which concurrent producers can make a later
    one (app.kafka.sequence)."""
    starts = _first_offsets(open_probe, partitions, timeout_s)
    later = [tp for tp in partitions if starts[tp] > 0]
    if later:
        # The broker gives a batch its offsets before it stores it: for a moment a read from 0 can
        # find a later batch first. A start above 0 is read again once that moment has passed.
        time.sleep(START_RECHECK_S)
        again = _first_offsets(open_probe, later, timeout_s)
        starts.update((tp, min(starts[tp], again[tp])) for tp in later)
    return [starts[tp] for tp in partitions]


def _first_offsets(
    open_probe: OpenProbe, partitions: list[Partition], timeout_s: float
) -> dict[Partition, int]:
    # One record per partition is wanted: no megabytes fetched ahead.
    consumer = open_probe(
        "earliest", {"max.partition.fetch.bytes": 65536, "fetch.max.bytes": 1048576, "queued.min.messages": 1}
    )
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
        starts: dict[Partition, int] = {}
        for key, msg in _first_answers(consumer, partitions, timeout_s, "start offsets"):
            starts[key] = msg.offset()  # a record, or the end (an end-of-partition event)
        return starts
    finally:
        consumer.close()


def _first_answers(
    consumer: ProbeConsumer, partitions: Iterable[Partition], timeout_s: float, what: str
) -> Iterator[tuple[Partition, Message]]:
    """The first record or end-of-partition event of each of `partitions` (assigned by the caller);
    ServiceUnavailable when they have not all come within `timeout_s`."""
    waiting = set(partitions)
    deadline = time.monotonic() + timeout_s
    while waiting:
        if time.monotonic() > deadline:
            raise ServiceUnavailable(f"{what} of {sorted(waiting)} not known after {timeout_s:.0f} s")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        key = (msg.topic(), msg.partition())
        if key not in waiting:
            continue
        if msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
            raise ServiceUnavailable(f"{key[0]}[{key[1]}]: {msg.error()}")
        waiting.discard(key)
        yield key, msg


def _true_end_offsets(open_probe: OpenProbe, partitions: list[Partition], timeout_s: float) -> list[int]:
    """End offsets that are right where ListOffsets under-reports: the high watermark of a fetch
    response. One fetch per partition, from its last listed record, so a partition written all the
    time answers as soon as a quiet one (its end as of that fetch)."""
    consumer = open_probe(
        "latest",  # a probe position the log no longer holds: the end is what is asked
        {
            "fetch.max.bytes": 1048576,
            # The probe starts at a record, so a fetch answers as soon as the broker has read it.
            # Not shorter: the embedded broker answers an empty fetch when its read of a long
            # partition outlasts the wait, and a 10 ms wait never got the end of a 50,000-record
            # changelog partition (a worker's table recovery then crashed).
            "fetch.wait.max.ms": 500,
        },
    )
    try:
        listed = [
            consumer.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s) for t, p in partitions
        ]
        ends = {tp: high for tp, (_, high) in zip(partitions, listed, strict=True)}
        # Probed wherever anything was written (not only where high > low: the embedded broker's
        # listed low can be above its listed high, app.kafka.sequence).
        probe = [
            TopicPartition(t, p, high - 1)
            for (t, p), (_, high) in zip(partitions, listed, strict=True)
            if high > 0
        ]
        if not probe:
            return [ends[tp] for tp in partitions]
        consumer.assign(probe)
        probed = [(tp.topic, tp.partition) for tp in probe]
        for key, msg in _first_answers(consumer, probed, timeout_s, "end offsets"):
            # A record or the end arrived: the fetch that brought it carried the partition's end.
            _, fetched_high = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
            seen = msg.offset() if msg.error() else msg.offset() + 1
            ends[key] = max(ends[key], fetched_high, seen)
        return [ends[tp] for tp in partitions]
    finally:
        consumer.close()
