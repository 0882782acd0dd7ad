"""Topic administration and offsets through confluent-kafka's AdminClient."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from app.errors import ConfigError, ServiceUnavailable
from app.kafka.consuming import offset_client, partition_reader
from app.waiting import poll_until

__all__ = [
    "KafkaAdmin",
    "TopicSpec",
    "committed_offsets",
    "resume_offsets",
    "true_end_offsets",
    "true_start_offsets",
]


START_RECHECK_S = 0.25


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


class KafkaAdmin:
    """`replication_factor` is that of the topics it creates: callers that create topics pass
    theirs (the KAFKA_REPLICATION_FACTOR setting); listing and offset lookups need none."""

    def __init__(self, bootstrap: str, replication_factor: int = 1) -> None:
        self.bootstrap = bootstrap
        self.replication_factor = replication_factor
        self._admin = AdminClient({"bootstrap.servers": bootstrap})

    def topics(self, timeout_s: float = 10.0) -> dict[str, int]:
        """Existing topics and their partition counts."""
        try:
            meta = self._admin.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise ServiceUnavailable(f"Kafka at {self.bootstrap} did not list topics: {exc}") from exc
        return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}

    def create(self, specs: list[TopicSpec], timeout_s: float = 30.0) -> list[str]:
        """Create the topics that do not exist yet; return the names created. Waits until visible."""
        existing = self.topics()
        missing = [s for s in specs if s.name not in existing]
        if not missing:
            return []
        futures = self._admin.create_topics(
            [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=self.replication_factor,
                    config=s.config,
                )
                for s in missing
            ],
            operation_timeout=timeout_s,
        )
        for name, fut in futures.items():
            try:
                fut.result(timeout=timeout_s)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise ServiceUnavailable(f"could not create topic {name}: {exc}") from exc
        self.wait_visible({s.name: s.partitions for s in missing}, timeout_s)
        return [s.name for s in missing]

    def ensure(self, specs: list[TopicSpec], timeout_s: float = 30.0) -> None:
        """Create the missing topics; give existing ones with fewer partitions than asked the
        rest (a topic auto-created by the broker's default may have fewer)."""
        existing = self.topics()
        self.create(specs, timeout_s)
        for spec in specs:
            if spec.name in existing and existing[spec.name] < spec.partitions:
                try:
                    self.add_partitions(spec.name, spec.partitions, timeout_s)
                except KafkaException as exc:
                    raise ConfigError(
                        f"topic {spec.name} has {existing[spec.name]} partitions, needs {spec.partitions}, "
                        f"which this broker cannot add ({exc.args[0].str()}): delete the topic or "
                        "configure another name"
                    ) from exc

    def add_partitions(self, topic: str, total: int, timeout_s: float = 30.0) -> None:
        futures = self._admin.create_partitions([NewPartitions(topic, total)])
        for fut in futures.values():
            fut.result(timeout=timeout_s)
        self.wait_visible({topic: total}, timeout_s)

    def delete(self, names: list[str], timeout_s: float = 30.0) -> None:
        existing = self.topics()
        doomed = [n for n in names if n in existing]
        if not doomed:
            return
        for fut in self._admin.delete_topics(doomed, operation_timeout=timeout_s).values():
            fut.result(timeout=timeout_s)

    def wait_visible(self, expected: dict[str, int], timeout_s: float) -> None:
        def visible() -> bool:
            topics = self.topics()
            return all(topics.get(name, 0) >= parts for name, parts in expected.items())

        if not poll_until(visible, timeout_s, every_s=0.05):
            raise ServiceUnavailable(f"topics {sorted(expected)} not visible after {timeout_s:.0f} s")

    def end_offsets(self, topic: str, partitions: int, timeout_s: float = 10.0) -> list[int]:
        """The next offset to be written, per partition.

        ListOffsets alone is not trusted: the embedded Tansu broker answers with the base
        offset of the last record batch + 1. A fetch from that point reports the true end
        (its high watermark), so we read on to the partition EOF. On Apache Kafka the two
        agree and the probe costs one empty fetch per partition.
        """
        return true_end_offsets(self.bootstrap, [(topic, p) for p in range(partitions)], timeout_s)

    def committed(self, group: str, topic: str, partitions: int) -> list[int]:
        """Committed offset of a consumer group per partition (-1 when none)."""
        consumer = offset_client(self.bootstrap, group)
        try:
            tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
            return [tp.offset if tp.offset >= 0 else -1 for tp in tps]
        finally:
            consumer.close()


def committed_offsets(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> list[int]:
    """The consumer group's committed offset of each partition (0 where it has none)."""
    consumer = offset_client(bootstrap, group)
    try:
        got = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
        return [max(tp.offset, 0) for tp in got]
    finally:
        consumer.close()


def resume_offsets(
    bootstrap: str, group: str, tps: list[tuple[str, int]], timeout_s: float = 10.0
) -> list[int]:
    """Where a consumer of the group resumes each partition: its committed offset, or the log
    start where it has none or retention took it (auto.offset.reset=earliest)."""
    consumer = offset_client(bootstrap, group)
    try:
        got = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout_s)
    finally:
        consumer.close()
    starts = true_start_offsets(bootstrap, tps, timeout_s)
    return [max(tp.offset, start, 0) for tp, start in zip(got, starts, strict=True)]


def true_start_offsets(
    bootstrap: str, partitions: list[tuple[str, int]], timeout_s: float = 10.0
) -> list[int]:
    """The first offset each partition holds (its end when it holds none), found by reading from 0:
    an offset the log no longer holds resets to its first. Not ListOffsets(earliest): the embedded
    broker answers it with the batch *written* first, which concurrent producers can make a later
    one (app.kafka.sequence)."""
    starts = _first_offsets(bootstrap, partitions, timeout_s)
    later = [tp for tp in partitions if starts[tp] > 0]
    if later:
        # The broker gives a batch its offsets before it stores it: for a moment a read from 0 can
        # find a later batch first. A start above 0 is read again once that moment has passed.
        time.sleep(START_RECHECK_S)
        again = _first_offsets(bootstrap, later, timeout_s)
        starts.update((tp, min(starts[tp], again[tp])) for tp in later)
    return [starts[tp] for tp in partitions]


def _first_offsets(
    bootstrap: str, partitions: list[tuple[str, int]], timeout_s: float
) -> dict[tuple[str, int], int]:
    consumer = partition_reader(
        bootstrap,
        "hubstream-offsets",
        reset="earliest",
        partition_eof=True,
        # One record per partition is wanted: no megabytes fetched ahead.
        overrides={"max.partition.fetch.bytes": 65536, "fetch.max.bytes": 1048576, "queued.min.messages": 1},
    )
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
        starts: dict[tuple[str, int], int] = {}
        for key, msg in _first_answers(consumer, partitions, timeout_s, "start offsets"):
            starts[key] = msg.offset()  # a record, or the end (an end-of-partition event)
        return starts
    finally:
        consumer.close()


def _first_answers(
    consumer: Consumer, partitions: Iterable[tuple[str, int]], timeout_s: float, what: str
) -> Iterator[tuple[tuple[str, int], Message]]:
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


def true_end_offsets(bootstrap: str, partitions: list[tuple[str, int]], timeout_s: float = 10.0) -> list[int]:
    """End offsets that are right even where ListOffsets under-reports (see KafkaAdmin.end_offsets):
    the high watermark of a fetch response. One fetch per partition, from its last listed record, so
    a partition written all the time answers as soon as a quiet one (its end as of that fetch)."""
    consumer = partition_reader(
        bootstrap,
        "hubstream-offsets",
        reset="latest",  # a probe position the log no longer holds: the end is what is asked
        partition_eof=True,
        overrides={
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
