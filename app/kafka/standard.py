"""The standard broker adapter: the answers Apache Kafka gives, taken as they are.

End and start offsets come from one ListOffsets request (AdminClient.list_offsets, latest and
earliest): no consumer is opened and nothing is fetched. A reader's fetches are not checked (the
guard passes every record through), Faust's recovery is left as it is, and a recovered table is
taken to hold its changelog's newest records.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal, Protocol, TypeVar

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from app.errors import ServiceUnavailable
from app.kafka_security import client_config

__all__ = ["OffsetLister", "PassThroughGuard", "StandardBroker"]

Partition = tuple[str, int]
T = TypeVar("T")


class OffsetLister(Protocol):
    """The one Kafka client call the adapter makes (AdminClient's)."""

    def list_offsets(
        self, topic_partition_offsets: dict[TopicPartition, OffsetSpec], **kwargs: Any
    ) -> dict[TopicPartition, Future[Any]]: ...


class PassThroughGuard:
    """The fetch guard of a broker whose fetches start where they are asked to: admits everything."""

    def expect(self, topic: str, partition: int, offset: int) -> None:
        pass

    def expect_all(self, tps: Iterable[TopicPartition]) -> None:
        pass

    def reassigned(self, starts: Mapping[Partition, int]) -> None:
        pass

    def forget(self, tps: Iterable[Partition]) -> None:
        pass

    def admit(self, messages: Iterable[Any]) -> list[Any]:
        return list(messages)

    def admit_run(self, topic: str, partition: int, records: Sequence[T]) -> list[T]:
        return list(records)


class StandardBroker:
    """Apache Kafka at `bootstrap` (`lister`: the client to ask, an AdminClient by default)."""

    kind: Literal["kafka"] = "kafka"
    recovery_misses_newest = False

    def __init__(self, bootstrap: str, lister: Callable[[], OffsetLister] | None = None) -> None:
        self.bootstrap = bootstrap
        self._open = lister or (lambda: AdminClient(client_config(bootstrap)))
        self._lister: OffsetLister | None = None
        self._lock = threading.Lock()

    def end_offsets(self, partitions: Sequence[Partition], timeout_s: float = 10.0) -> list[int]:
        return self._listed(partitions, OffsetSpec.latest(), timeout_s, "end offsets")

    def start_offsets(self, partitions: Sequence[Partition], timeout_s: float = 10.0) -> list[int]:
        return self._listed(partitions, OffsetSpec.earliest(), timeout_s, "start offsets")

    def fetch_guard(
        self, seek: Callable[[str, int, int], None], *, compacted: bool = False
    ) -> PassThroughGuard:
        return PassThroughGuard()

    def patch_faust_recovery(self) -> None:
        pass  # Faust's ListOffsets answers are right here

    def _client(self) -> OffsetLister:
        with self._lock:
            if self._lister is None:
                self._lister = self._open()
            return self._lister

    def _listed(
        self, partitions: Sequence[Partition], spec: OffsetSpec, timeout_s: float, what: str
    ) -> list[int]:
        if not partitions:
            return []
        wanted = dict.fromkeys(partitions)
        asked = {TopicPartition(t, p): spec for t, p in wanted}
        try:
            futures = self._client().list_offsets(asked, request_timeout=timeout_s)
            answers = {
                (tp.topic, tp.partition): f.result(timeout=timeout_s).offset for tp, f in futures.items()
            }
        except (KafkaException, TimeoutError) as exc:
            raise ServiceUnavailable(f"{what} of {sorted(wanted)} not known: {exc}") from exc
        missing = [tp for tp in wanted if tp not in answers]
        if missing:
            raise ServiceUnavailable(f"{what} of {sorted(missing)} not answered")
        return [int(answers[tp]) for tp in partitions]
