"""A producer confirms what it sent before it writes the storage topic a switch moved to
(`RoutedTarget`): one producer's records of a group in the older storage topic are all stored
before its first one in the newer, however long the client retries them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from app.composite.model import CompositeTopic
from app.composite.producer import RoutedTarget
from app.errors import ServiceUnavailable


@dataclass
class Definitions:
    topic: CompositeTopic

    def get(self, name: str) -> CompositeTopic:
        assert name == self.topic.name
        return self.topic


@dataclass
class Producer:
    """Records handed over and confirmed; `flush` confirms them all, or fails `failing` times."""

    router: RoutedTarget | None = None
    failing: int = 0
    sent: list[tuple[str, str]] = field(default_factory=list)  # (storage topic, group)
    unconfirmed: list[tuple[str, str]] = field(default_factory=list)
    flushes: int = 0

    def flush(self) -> None:
        self.flushes += 1
        if self.failing:
            self.failing -= 1
            raise ServiceUnavailable("records not confirmed")
        self.unconfirmed.clear()

    def produce(self, group: str) -> None:
        assert self.router is not None
        topic, _, _ = self.router.route(group)
        if topic != self.router.topic.storage_topics[0].name:
            assert not any(t == self.router.topic.storage_topics[0].name for t, _ in self.unconfirmed), (
                "a record went to the newer storage topic while the older one had unconfirmed records"
            )
        self.sent.append((topic, group))
        self.unconfirmed.append((topic, group))


def _setup(failing: int = 0) -> tuple[Definitions, Producer]:
    definitions = Definitions(CompositeTopic.create("orders", 4).add_storage_topic(8))
    producer = Producer(failing=failing)
    producer.router = RoutedTarget(definitions, "orders", 0.0, 256, before_switch=producer.flush)
    return definitions, producer


def test_a_switch_is_followed_only_after_what_was_sent_is_confirmed() -> None:
    definitions, producer = _setup()
    for g in ("a", "b", "c"):
        producer.produce(g)
    assert producer.flushes == 0
    definitions.topic = definitions.topic.switch_produce()
    producer.produce("a")
    producer.produce("b")
    assert producer.flushes == 1  # once, at the switch
    assert [t for t, _ in producer.sent] == ["orders.0"] * 3 + ["orders.1"] * 2


def test_a_definition_change_that_keeps_the_pointer_needs_no_flush() -> None:
    definitions, producer = _setup()
    producer.produce("a")
    definitions.topic = definitions.topic.add_storage_topic(12)
    producer.produce("a")
    assert producer.flushes == 0
    assert producer.router is not None and len(producer.router.topic.storage_topics) == 3


def test_a_flush_that_fails_keeps_the_old_route_until_one_succeeds() -> None:
    definitions, producer = _setup(failing=1)
    producer.produce("a")
    definitions.topic = definitions.topic.switch_produce()
    with pytest.raises(ServiceUnavailable):
        producer.produce("b")
    assert producer.router is not None and producer.router.topic.produce_pointer == 0
    producer.produce("b")  # the flush is tried again before the switch
    assert producer.flushes == 2
    assert producer.sent == [("orders.0", "a"), ("orders.1", "b")]


async def test_the_async_flavour_flushes_between_switch_pending_and_switch() -> None:
    definitions, producer = _setup()
    router = producer.router
    assert router is not None
    assert not router.switch_pending()
    definitions.topic = definitions.topic.switch_produce()
    assert router.switch_pending()
    assert router.target("a")[0] == "orders.0"  # held back until the caller confirmed
    assert router.switch_pending()  # asked again: still pending, the store not read twice
    router.switch()
    assert router.target("a")[0] == "orders.1"
    assert not router.switch_pending()
