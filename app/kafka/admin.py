"""Topic administration and offsets through confluent-kafka's AdminClient."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from app.errors import ConfigError, ServiceUnavailable
from app.kafka.consuming import offset_client
from app.kafka_security import client_config
from app.waiting import poll_until

if TYPE_CHECKING:
    from app.kafka.broker import BrokerPort

__all__ = [
    "KafkaAdmin",
    "TopicSpec",
    "committed_offsets",
    "resume_offsets",
]


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
        self._admin = AdminClient(client_config(bootstrap))

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
    broker: BrokerPort, group: str, tps: list[tuple[str, int]], timeout_s: float = 10.0
) -> list[int]:
    """Where a consumer of the group resumes each partition: its committed offset, or the log
    start where it has none or retention took it (auto.offset.reset=earliest)."""
    consumer = offset_client(broker.bootstrap, group)
    try:
        got = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout_s)
    finally:
        consumer.close()
    starts = broker.start_offsets(tps, timeout_s)
    return [max(tp.offset, start, 0) for tp, start in zip(got, starts, strict=True)]
