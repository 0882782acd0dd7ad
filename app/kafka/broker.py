"""The broker port: every question whose answer differs between Kafka-compatible brokers.

hubstream runs on Apache Kafka (or a broker that answers as it does) and on the embedded Tansu
broker, whose answers to a few questions are wrong in ways hubstream works around. Those
questions, and only those, are asked here:

- `end_offsets` / `start_offsets`: where each partition ends and starts;
- `fetch_guard`: a check of where a reader's fetches start and continue (a client told "the
  beginning" may start past records the log holds);
- `patch_faust_recovery`: whether Faust's table recovery must be given other offsets;
- `recovery_misses_newest`: whether a table Faust recovered may lack its changelog's newest
  records, so that a holder who re-reads the changelog to its end writes back what it missed.

Two adapters implement it: `StandardBroker` (app.kafka.standard: the answers Kafka gives) and
`EmbeddedBrokerQuirks` (app.kafka.embedded: today's compensations). `broker_for` chooses one from
the settings (KAFKA_BROKER_KIND), once per kind and bootstrap address; nothing else builds one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from confluent_kafka import TopicPartition

from app.kafka.embedded import EmbeddedBrokerQuirks
from app.kafka.standard import StandardBroker
from app.settings import BROKER_KINDS, BrokerKind

__all__ = [
    "BROKER_KINDS",
    "BrokerChoice",
    "BrokerKind",
    "BrokerPort",
    "FetchGuard",
    "Partition",
    "Seek",
    "broker_for",
    "broker_of",
    "confluent_seek",
]

Partition = tuple[str, int]


class Seek(Protocol):
    def __call__(self, topic: str, partition: int, offset: int, /) -> None: ...


class HasOffset(Protocol):
    @property
    def offset(self) -> int: ...


R = TypeVar("R", bound=HasOffset)


class FetchGuard(Protocol):
    """One reader's check of where its fetches start and continue (app.kafka.sequence). Call
    `expect` wherever the reader places a partition; hand every batch through `admit`."""

    def expect(self, topic: str, partition: int, offset: int) -> None: ...

    def expect_all(self, tps: Iterable[TopicPartition]) -> None: ...

    def reassigned(self, starts: Mapping[Partition, int]) -> None: ...

    def forget(self, tps: Iterable[Partition]) -> None: ...

    def admit(self, messages: Iterable[Any]) -> list[Any]:
        """The confluent-kafka messages that continue their partitions, in order."""
        ...

    def admit_run(self, topic: str, partition: int, records: Sequence[R]) -> list[R]:
        """The leading records of one partition's run (aiokafka records) that continue it."""
        ...


class BrokerPort(Protocol):
    """The broker at `bootstrap`, as far as its answers differ from broker to broker."""

    @property
    def kind(self) -> BrokerKind: ...

    @property
    def bootstrap(self) -> str: ...

    @property
    def recovery_misses_newest(self) -> bool:
        """Whether a table Faust recovered may lack its changelog's newest records."""
        ...

    def end_offsets(self, partitions: Sequence[Partition], timeout_s: float = 10.0) -> list[int]:
        """The next offset to be written, per partition; ServiceUnavailable past `timeout_s`."""
        ...

    def start_offsets(self, partitions: Sequence[Partition], timeout_s: float = 10.0) -> list[int]:
        """The first offset each partition holds (its end when it holds none)."""
        ...

    def fetch_guard(self, seek: Seek, *, compacted: bool = False) -> FetchGuard:
        """A guard for one reader that seeks with `seek`; `compacted`: check only the starts."""
        ...

    def patch_faust_recovery(self) -> None:
        """Give Faust's table recovery this broker's offsets where it needs them (once a process)."""
        ...


class BrokerChoice(Protocol):
    """Settings that choose a broker: the global Settings, or a library consumer's ConsumerSettings."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def broker_kind(self) -> BrokerKind: ...


@lru_cache(maxsize=32)
def broker_of(kind: BrokerKind, bootstrap: str) -> BrokerPort:
    """The adapter for a broker of `kind` at `bootstrap` (one per process and address)."""
    if kind == "embedded":
        return EmbeddedBrokerQuirks(bootstrap)
    if kind == "kafka":
        return StandardBroker(bootstrap)
    raise ValueError(f"unknown broker kind {kind!r}: use one of {', '.join(BROKER_KINDS)}")


def broker_for(settings: BrokerChoice) -> BrokerPort:
    """The broker port the settings choose (KAFKA_BROKER_KIND, or ConsumerSettings.broker_kind)."""
    return broker_of(settings.broker_kind, settings.bootstrap)


def confluent_seek(consumer: Any) -> Seek:
    """`seek` for a guard over a confluent-kafka consumer."""

    def seek(topic: str, partition: int, offset: int) -> None:
        consumer.seek(TopicPartition(topic, partition, offset))

    return seek
