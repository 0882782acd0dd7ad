"""The broker port (app.kafka.broker) and its two adapters, against in-memory fakes of the Kafka
client calls they make: the standard one's ListOffsets request (AdminClient.list_offsets), the
embedded one's probe consumers. No broker."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from app.consumer.model import ConsumerSettings
from app.errors import InvalidInput, ServiceUnavailable
from app.kafka import consuming, embedded
from app.kafka.broker import BrokerPort, broker_for, broker_of, confluent_seek
from app.kafka.embedded import EmbeddedBrokerQuirks
from app.kafka.sequence import SequenceGuard
from app.kafka.standard import PassThroughGuard, StandardBroker
from app.settings import Settings

Partition = tuple[str, int]


# -- fakes -------------------------------------------------------------------------------------
class Eof:
    def code(self) -> int:
        return int(KafkaError._PARTITION_EOF)


@dataclass
class FakeMessage:
    where: Partition
    at: int
    eof: bool = False

    def topic(self) -> str:
        return self.where[0]

    def partition(self) -> int:
        return self.where[1]

    def offset(self) -> int:
        return self.at

    def error(self) -> Eof | None:
        return Eof() if self.eof else None


@dataclass
class TansuLog:
    """Partitions as the embedded broker holds them: record batches (their sizes, in write order).
    Its ListOffsets answers the base offset of the last batch + 1; a fetch reports the true end.
    `late`: where a first read from 0 finds a later batch (one not stored yet)."""

    batches: dict[Partition, list[int]]
    late: dict[Partition, int] = field(default_factory=dict)
    probes: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)

    def end(self, where: Partition) -> int:
        return sum(self.batches.get(where, []))

    def listed_end(self, where: Partition) -> int:
        sizes = self.batches.get(where, [])
        return sum(sizes[:-1]) + 1 if sizes else 0

    def open(self, reset: str, overrides: Mapping[str, Any]) -> FakeProbe:
        self.probes.append((reset, overrides))
        return FakeProbe(self, reset)


@dataclass
class FakeProbe:
    log: TansuLog
    reset: str
    positions: dict[Partition, int] = field(default_factory=dict)
    fetched_high: dict[Partition, int] = field(default_factory=dict)
    polls: int = 0
    closed: bool = False

    def assign(self, partitions: list[TopicPartition], /) -> None:
        for tp in partitions:
            where = (tp.topic, tp.partition)
            end = self.log.end(where)
            at = tp.offset if 0 <= tp.offset <= end else (end if self.reset == "latest" else 0)
            self.positions[where] = self.log.late.pop(where, at) if at == 0 and end else at

    def poll(self, timeout: float = -1, /) -> FakeMessage | None:
        """The next fetched record or end of the assigned partitions, taken in turn."""
        if not self.positions:
            return None
        where = list(self.positions)[self.polls % len(self.positions)]
        self.polls += 1
        at, end = self.positions[where], self.log.end(where)
        self.fetched_high[where] = end
        self.positions[where] = min(at + 1, end)
        return FakeMessage(where, at, eof=at >= end)

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        where = (partition.topic, partition.partition)
        if cached:
            return 0, self.fetched_high.get(where, -1001)
        return 0, self.log.listed_end(where)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeLister:
    """AdminClient.list_offsets over fixed answers; `fail`: raise as a broker that does not answer."""

    latest: dict[Partition, int]
    earliest: dict[Partition, int]
    fail: bool = False
    requests: list[dict[Partition, str]] = field(default_factory=list)

    def list_offsets(
        self, topic_partition_offsets: dict[TopicPartition, OffsetSpec], **kwargs: Any
    ) -> dict[TopicPartition, Future[Any]]:
        if self.fail:
            raise KafkaException("broker down")
        latest = type(OffsetSpec.latest())
        asked = {
            (tp.topic, tp.partition): "latest" if isinstance(spec, latest) else "earliest"
            for tp, spec in topic_partition_offsets.items()
        }
        self.requests.append(asked)
        out: dict[TopicPartition, Future[Any]] = {}
        for (topic, partition), kind in asked.items():
            answers = self.latest if kind == "latest" else self.earliest
            if (topic, partition) in answers:
                done: Future[Any] = Future()
                done.set_result(SimpleNamespace(offset=answers[(topic, partition)]))
                out[TopicPartition(topic, partition)] = done
        return out


@pytest.fixture
def no_probe_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building any confluent-kafka consumer fails the test."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a consumer was built")

    monkeypatch.setattr(consuming, "Consumer", refused)
    monkeypatch.setattr(embedded, "partition_reader", refused)


TWO = [("t", 0), ("t", 1)]


# -- the standard adapter ----------------------------------------------------------------------
def test_the_standard_end_is_one_listoffsets_request_and_no_probe_consumer(no_probe_consumer: None) -> None:
    lister = FakeLister(latest={("t", 0): 11, ("t", 1): 3}, earliest={})
    broker = StandardBroker("b:9", lister=lambda: lister)
    assert broker.end_offsets(TWO) == [11, 3]  # as Kafka gives it: nothing read on
    assert lister.requests == [{("t", 0): "latest", ("t", 1): "latest"}]


def test_the_standard_start_is_listoffsets_earliest(no_probe_consumer: None) -> None:
    lister = FakeLister(latest={}, earliest={("t", 0): 4, ("t", 1): 0})
    broker = StandardBroker("b:9", lister=lambda: lister)
    assert broker.start_offsets([("t", 1), ("t", 0)]) == [0, 4]
    assert lister.requests == [{("t", 1): "earliest", ("t", 0): "earliest"}]


def test_the_standard_adapter_opens_one_client_and_asks_nothing_for_no_partitions() -> None:
    opened: list[FakeLister] = []

    def open_lister() -> FakeLister:
        opened.append(FakeLister(latest={("t", 0): 1}, earliest={("t", 0): 0}))
        return opened[-1]

    broker = StandardBroker("b:9", lister=open_lister)
    assert broker.end_offsets([]) == [] and opened == []
    broker.end_offsets([("t", 0)])
    broker.start_offsets([("t", 0)])
    assert len(opened) == 1 and len(opened[0].requests) == 2


def test_a_standard_answer_missing_or_refused_is_service_unavailable() -> None:
    missing = StandardBroker("b:9", lister=lambda: FakeLister(latest={("t", 0): 1}, earliest={}))
    with pytest.raises(ServiceUnavailable, match="not answered"):
        missing.end_offsets(TWO)
    down = StandardBroker("b:9", lister=lambda: FakeLister(latest={}, earliest={}, fail=True))
    with pytest.raises(ServiceUnavailable, match="broker down"):
        down.start_offsets(TWO)


def test_the_standard_guard_passes_everything_and_never_seeks() -> None:
    seeks: list[tuple[str, int, int]] = []
    broker = StandardBroker("b:9", lister=lambda: FakeLister(latest={}, earliest={}))
    guard = broker.fetch_guard(lambda t, p, o: seeks.append((t, p, o)), compacted=True)
    assert isinstance(guard, PassThroughGuard)
    guard.expect("t", 0, 0)
    skipped = [FakeMessage(("t", 0), 7), FakeMessage(("t", 0), 9, eof=True)]
    assert guard.admit(skipped) == skipped
    assert guard.admit_run("t", 0, [SimpleNamespace(offset=5)]) == [SimpleNamespace(offset=5)]
    guard.reassigned({("t", 0): 3})
    guard.forget([("t", 0)])
    assert seeks == []


def test_the_standard_adapter_leaves_faust_and_recovered_tables_alone() -> None:
    broker = StandardBroker("b:9", lister=lambda: FakeLister(latest={}, earliest={}))
    broker.patch_faust_recovery()  # nothing to patch (tests/unit/kafka/test_faust_compat.py)
    assert broker.kind == "kafka" and broker.recovery_misses_newest is False


# -- the embedded adapter ----------------------------------------------------------------------
def test_the_embedded_end_is_the_fetched_one_where_listoffsets_under_reports() -> None:
    log = TansuLog({("t", 0): [10, 5], ("t", 1): [3]})
    assert [log.listed_end(tp) for tp in TWO] == [11, 1]  # what ListOffsets says
    broker = EmbeddedBrokerQuirks("b:9", open_probe=log.open)
    assert broker.end_offsets(TWO) == [15, 3]
    assert broker.end_offsets([("t", 2)]) == [0]  # nothing written: nothing probed


def test_the_embedded_answers_equal_the_compensations_they_wrap() -> None:
    def log() -> TansuLog:
        return TansuLog({("t", 0): [10, 5], ("t", 1): [3], ("t", 2): []}, late={("t", 1): 2})

    tps = [*TWO, ("t", 2)]
    broker = EmbeddedBrokerQuirks("b:9", open_probe=log().open)
    ends, starts = broker.end_offsets(tps), broker.start_offsets(tps)
    assert ends == embedded._true_end_offsets(log().open, tps, 10.0) == [15, 3, 0]
    assert starts == embedded._true_start_offsets(log().open, tps, 10.0) == [0, 0, 0]


def test_an_embedded_start_found_late_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "START_RECHECK_S", 0.0)
    log = TansuLog({("t", 0): [2, 2]}, late={("t", 0): 2})  # the first read found the later batch
    assert EmbeddedBrokerQuirks("b:9", open_probe=log.open).start_offsets([("t", 0)]) == [0]
    assert len(log.probes) == 2  # read again once


def test_the_embedded_probes_are_todays_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default probe is the partition reader the compensations always used."""
    built: list[dict[str, Any]] = []
    log = TansuLog({("t", 0): [1]})

    def reader(bootstrap: str, group_id: str, **options: Any) -> FakeProbe:
        built.append({"bootstrap": bootstrap, "group_id": group_id, **options})
        return FakeProbe(log, options["reset"])

    monkeypatch.setattr(embedded, "partition_reader", reader)
    broker = EmbeddedBrokerQuirks("b:9")
    assert broker.end_offsets([("t", 0)]) == [1] and broker.start_offsets([("t", 0)]) == [0]
    assert [(b["bootstrap"], b["group_id"], b["reset"], b["partition_eof"]) for b in built] == [
        ("b:9", "hubstream-offsets", "latest", True),
        ("b:9", "hubstream-offsets", "earliest", True),
    ]
    assert built[0]["overrides"]["fetch.wait.max.ms"] == 500
    assert built[1]["overrides"]["queued.min.messages"] == 1


def test_the_embedded_guard_reads_back_what_the_client_skipped() -> None:
    seeks: list[tuple[str, int, int]] = []
    broker = EmbeddedBrokerQuirks("b:9", open_probe=TansuLog({}).open)
    guard = broker.fetch_guard(lambda t, p, o: seeks.append((t, p, o)))
    assert isinstance(guard, SequenceGuard)
    guard.expect("t", 0, 0)
    assert guard.admit([FakeMessage(("t", 0), 3)]) == []  # started past offsets 0-2
    assert seeks == [("t", 0, 0)]
    assert guard.admit([FakeMessage(("t", 0), 0)]) == [FakeMessage(("t", 0), 0)]


def test_the_embedded_adapter_says_recovered_tables_may_miss_records() -> None:
    broker = EmbeddedBrokerQuirks("b:9", open_probe=TansuLog({}).open)
    assert broker.kind == "embedded" and broker.recovery_misses_newest is True


def test_confluent_seek_seeks_the_consumer() -> None:
    sought: list[TopicPartition] = []
    confluent_seek(SimpleNamespace(seek=sought.append))("t", 2, 9)
    assert [(tp.topic, tp.partition, tp.offset) for tp in sought] == [("t", 2, 9)]


# -- the choice --------------------------------------------------------------------------------
def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name in ("KAFKA_BOOTSTRAP", "KAFKA_BROKER_KIND"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def test_the_embedded_broker_gets_the_embedded_adapter_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch)
    assert settings.embedded_kafka and settings.broker_kind == "embedded"
    assert isinstance(broker_for(settings), EmbeddedBrokerQuirks)
    assert broker_for(settings).bootstrap == settings.bootstrap


def test_a_configured_kafka_gets_the_standard_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, KAFKA_BOOTSTRAP="kafka:9092")
    assert settings.broker_kind == "kafka"
    broker = broker_for(settings)
    assert isinstance(broker, StandardBroker) and broker.bootstrap == "kafka:9092"


@pytest.mark.parametrize(
    ("env", "adapter"),
    [
        ({"KAFKA_BOOTSTRAP": "tansu:9092", "KAFKA_BROKER_KIND": "embedded"}, EmbeddedBrokerQuirks),
        ({"KAFKA_BROKER_KIND": "kafka"}, StandardBroker),
        ({"KAFKA_BOOTSTRAP": "kafka:9092", "KAFKA_BROKER_KIND": "kafka"}, StandardBroker),
    ],
)
def test_an_explicit_kind_wins(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], adapter: type) -> None:
    assert isinstance(broker_for(_settings(monkeypatch, **env)), adapter)


def test_an_unknown_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"KAFKA_BROKER_KIND|kafka_broker_kind"):
        _settings(monkeypatch, KAFKA_BROKER_KIND="redpanda")
    with pytest.raises(ValueError, match="unknown broker kind"):
        broker_of("redpanda", "b:9")  # type: ignore[arg-type]


def test_one_adapter_per_kind_and_address(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, KAFKA_BOOTSTRAP="kafka:9092")
    again = _settings(monkeypatch, KAFKA_BOOTSTRAP="kafka:9092")
    assert broker_for(settings) is broker_for(again) is broker_of("kafka", "kafka:9092")
    assert broker_of("embedded", "kafka:9092") is not broker_of("kafka", "kafka:9092")


def test_a_library_consumer_chooses_in_its_own_settings() -> None:
    default = ConsumerSettings(name="c", topic="t", bootstrap="b:9")
    assert default.broker_kind == "embedded" and isinstance(broker_for(default), EmbeddedBrokerQuirks)
    on_kafka = ConsumerSettings(name="c", topic="t", bootstrap="b:9", broker_kind="kafka")
    port: BrokerPort = broker_for(on_kafka)
    assert isinstance(port, StandardBroker) and port.bootstrap == "b:9"
    with pytest.raises(InvalidInput, match="broker_kind"):
        ConsumerSettings(name="c", topic="t", bootstrap="b:9", broker_kind="tansu")  # type: ignore[arg-type]
