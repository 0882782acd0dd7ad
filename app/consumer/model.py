"""What a user of the consumer library writes against: the settings of one consumer, the message
its handler receives, the handler's Protocol and the two errors a handler raises on purpose.

Pure values; `app.consumer.kafka` runs them against the broker.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from app.composite.advance import switch_grace
from app.composite.model import check_topic_name, storage_topic_name
from app.errors import HubstreamError, InvalidInput
from app.ordered.policy import OnDlq, RetryPolicy
from app.settings import BROKER_KINDS, DEFAULT_METADATA_TOPIC, BrokerKind

__all__ = [
    "ConsumerSettings",
    "Filter",
    "Handler",
    "KeyOf",
    "Message",
    "OnDlq",
    "PermanentError",
    "RetriableError",
    "RetryPolicy",
    "ThrottlePolicy",
    "key_from_header",
    "record_key",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,120}$")


class Message(NamedTuple):
    """One record handed to a handler. `message_id` (`topic-partition-offset` of the source) is
    the same on every attempt; `attempt` is 1 on the first. A named tuple: one is built per
    record, and a tuple is the cheapest immutable value to build."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    ordering_key: str
    value: bytes | None
    headers: Mapping[str, bytes]
    attempt: int

    @property
    def message_id(self) -> str:
        return message_id(self.topic, self.partition, self.offset)


def message_id(topic: str, partition: int, offset: int) -> str:
    return f"{topic}-{partition}-{offset}"


class Handler(Protocol):
    async def __call__(self, message: Message, /) -> None: ...


KeyOf = Callable[[Message], str]
"""Ordering key of a record: messages with the same key run one at a time, in offset order."""
Filter = Callable[[Message], bool]
"""False: the message is done without calling the handler."""


def record_key(message: Message) -> str:
    """The default ordering key: the record key (records without one share the key "")."""
    return (message.key or b"").decode("utf-8", "replace")


def key_from_header(name: str) -> KeyOf:
    """Ordering key from a header (records without it fall back to the record key)."""

    def key_of(message: Message) -> str:
        value = message.headers.get(name)
        return record_key(message) if value is None else value.decode("utf-8", "replace")

    return key_of


class RetriableError(HubstreamError):
    """Raised by a handler: try this message again later (per the retry policy), keeping its key's
    later messages behind it. Any other exception counts as retriable too."""

    retriable = True


class PermanentError(HubstreamError):
    """Raised by a handler: this message will never succeed; dead-letter it now."""

    retriable = False


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """Slow every copy down while the failure rate across all copies, over `window_s`, is above
    `error_rate` (with at least `min_attempts` attempts in the window): each copy then starts at
    most `throttled_per_s / live copies` messages per second."""

    error_rate: float = 0.5
    window_s: float = 10.0
    min_attempts: int = 20
    throttled_per_s: float = 50.0

    def __post_init__(self) -> None:
        if not 0 < self.error_rate <= 1:
            raise InvalidInput("throttle error_rate must be in (0, 1]")
        if self.window_s <= 0 or self.throttled_per_s <= 0 or self.min_attempts < 1:
            raise InvalidInput("throttle window_s, throttled_per_s and min_attempts must be positive")


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """One consumer, the same in every copy. `name` is the Kafka consumer group and the prefix of
    its own topics: `<name>-retry`, `<name>-dlq`, `<name>-state` (compacted), `<name>-members`,
    `<name>-requests` and `<name>-replies` (questions about a key, answered by its owner).

    The source is `topic` (a Kafka topic) or `composite_topic` (a composite topic's name, resolved
    in the metadata topic `metadata_topic`, the CLI's from the COMPOSITE_METADATA_TOPIC setting): its
    storage topics are read in order, the next one only once the produce pointer has been past the
    current one for `grace_s` (producers still holding the old pointer) and the group has
    committed every partition of it to its end. The topics the consumer creates get
    `replication_factor` replicas (the CLI's: the KAFKA_REPLICATION_FACTOR setting). `broker_kind`
    says which broker answers (app.kafka.broker; the CLI's: the KAFKA_BROKER_KIND setting):
    "embedded" (the default, right on every broker) works around the embedded Tansu broker's
    answers, "kafka" takes Apache Kafka's as they are."""

    name: str
    topic: str = ""
    bootstrap: str = ""
    key_of: KeyOf = record_key
    concurrency: int = 64  # messages in flight in this copy (one per key at a time)
    buffered: int = 1_000  # records read ahead of the handler in this copy
    global_in_flight: int | None = None  # across all copies; split over the topic's partitions
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_dlq: OnDlq = OnDlq.BLOCK_GROUP
    filter: Filter | None = None
    throttle: ThrottlePolicy | None = None
    commit_interval_s: float = 1.0
    heartbeat_s: float = 2.0
    session_timeout_s: float = 6.0
    revoke_timeout_s: float = 5.0  # handlers of revoked partitions still running then are abandoned
    # A copy's lease of each partition it owns (app.ordered.lease): a copy paused past it hands
    # nothing more to its handler for those partitions; taking over from a copy that did not
    # release them (kill -9) waits this long.
    lease_s: float = 6.0
    composite_topic: str | None = None  # the source, instead of `topic`
    metadata_topic: str = DEFAULT_METADATA_TOPIC  # where composite topics are defined
    replication_factor: int = 1  # of the topics the consumer creates (its own, the metadata topic)
    # After a produce-pointer switch, before leaving a drained storage topic: None waits what a
    # shard waits, two of the producers' definition refreshes and a second (`switch_grace`).
    switch_grace_s: float | None = None
    # How often producers re-read a composite topic's definition (COMPOSITE_METADATA_REFRESH_S of
    # the hosts that produce; the CLI's: its own setting).
    metadata_refresh_s: float = 10.0
    # how far this host's clock may run ahead of the one that switched (a start judges the grace
    # on the switch time the definition records)
    clock_skew_s: float = 30.0
    broker_kind: BrokerKind = "embedded"
    # When set, this copy serves Prometheus metrics on http://metrics_host:metrics_port/metrics
    # (its counters, the process's series); a copy has no web server otherwise.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidInput(f"consumer name {self.name!r}: use 1-121 of A-Z a-z 0-9 _ . -")
        if self.topic and self.composite_topic is not None:
            raise InvalidInput(
                f"consumer {self.name!r} has both topic={self.topic!r} and "
                f"composite_topic={self.composite_topic!r}: give one source"
            )
        if self.composite_topic is not None:
            check_topic_name(self.composite_topic)
        elif not self.topic:
            raise InvalidInput(
                "consumer topic is empty: give topic (a Kafka topic) or composite_topic (a composite topic)"
            )
        if not self.bootstrap:
            raise InvalidInput("consumer bootstrap is empty")
        if not (self.grace_s >= 0 and self.clock_skew_s >= 0):  # NaN too
            raise InvalidInput("switch_grace_s and clock_skew_s must be numbers, not negative")
        if not self.metadata_refresh_s > 0:
            raise InvalidInput("metadata_refresh_s must be a positive number of seconds")
        if self.replication_factor < 1:
            raise InvalidInput("replication_factor must be at least 1")
        if self.broker_kind not in BROKER_KINDS:
            raise InvalidInput(f"broker_kind {self.broker_kind!r}: use one of {', '.join(BROKER_KINDS)}")
        if self.concurrency < 1 or self.buffered < 1:
            raise InvalidInput("concurrency and buffered must be at least 1")
        if self.global_in_flight is not None and self.global_in_flight < 1:
            raise InvalidInput("global_in_flight must be at least 1")
        if not self.lease_s >= 1.0:  # NaN too
            raise InvalidInput("lease_s must be at least 1 second")
        if min(self.commit_interval_s, self.heartbeat_s, self.session_timeout_s, self.revoke_timeout_s) <= 0:
            raise InvalidInput("intervals and timeouts must be positive")

    @property
    def grace_s(self) -> float:
        """The switch grace this copy waits: `switch_grace_s`, else what a shard waits."""
        if self.switch_grace_s is not None:
            return self.switch_grace_s
        return switch_grace(self.metadata_refresh_s)

    @property
    def source(self) -> str:
        """The source's name: the topic, or the composite topic."""
        return self.composite_topic if self.composite_topic is not None else self.topic

    def source_topic(self, storage_idx: int) -> str:
        """The Kafka topic a main position `(storage_idx, offset)` is in: the topic, or the
        composite topic's storage topic `storage_idx`."""
        if self.composite_topic is None:
            return self.topic
        return storage_topic_name(self.composite_topic, storage_idx)

    @property
    def owners_topic(self) -> str:
        """The owner log of this consumer's partitions (`app.ordered.owner_log`)."""
        return f"{self.name}-owners"

    @property
    def retry_topic(self) -> str:
        return f"{self.name}-retry"

    @property
    def dlq_topic(self) -> str:
        return f"{self.name}-dlq"

    @property
    def state_topic(self) -> str:
        return f"{self.name}-state"

    @property
    def members_topic(self) -> str:
        return f"{self.name}-members"

    @property
    def requests_topic(self) -> str:
        """Questions about a key, in the key's lane partition, read by the partition's owner."""
        return f"{self.name}-requests"

    @property
    def replies_topic(self) -> str:
        """The owners' answers (one partition)."""
        return f"{self.name}-replies"
