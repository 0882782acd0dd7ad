"""A copy the broker refuses for good (too large, invalid) no longer holds its group, and its shard,
forever: refused by RQ it goes to DLQ with the reason; refused by DLQ too, a stub (no payload nor
headers of its own) takes its place there, naming the reason and where the message is. A copy
that was merely not confirmed still fails the poll (the shard restarts and tries again).
Before, every refusal was retried at each restart."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from aiokafka import ConsumerRecord
from confluent_kafka import KafkaError

from app.composite.producer import ProduceFailed, RecordRefused, produce_failed
from app.ordered.records import InternalMeta, decode_internal
from app.ordered.rules import Position
from app.ordered.work import SourceRecord
from app.settings import Settings
from app.subscription.delivery import Delivery, ShardStats, main_work
from app.subscription.errors import EndpointUnavailable
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.records import SubscriptionMessage


def record(group: str, offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord("mq.0", 0, offset, 0, 0, group.encode(), b"x" * 100, None, 1, 1, [("user", b"h")])


async def failing(message: SubscriptionMessage) -> None:
    raise EndpointUnavailable("503")


class Broker:
    """RQ/DLQ storage that refuses records per queue: `refuse` maps a queue to the exception."""

    def __init__(self, refuse: dict[str, Exception]) -> None:
        self.refuse = refuse
        self.written: list[tuple[str, str, SourceRecord, InternalMeta]] = []

    async def produce_to(
        self, queue: str, group: str, rec: SourceRecord, headers: Sequence[tuple[str, bytes]]
    ) -> Position:
        refusal = self.refuse.get(queue)
        if refusal is not None and rec.value:
            raise refusal
        self.written.append((queue, group, rec, decode_internal(headers)))
        return (0, len(self.written) - 1)


def delivery(broker: Broker, states: MemoryStates) -> Delivery:
    sub = Subscription("s", "mq", EndpointSpec("http", "http://127.0.0.1:1/"))
    return Delivery(Settings(), sub, states, ShardStats(), broker.produce_to, 0, failing)


async def test_a_copy_rq_refuses_goes_to_dlq_with_the_reason() -> None:
    broker, states = Broker({"rq": RecordRefused("rq.0[0]: message too large")}), MemoryStates()
    await delivery(broker, states).process([main_work(record("g", 7), 0, 256)])
    [(queue, group, rec, meta)] = broker.written
    assert (queue, group, rec.value) == ("dlq", "g", b"x" * 100)
    assert meta.failure is not None and meta.failure.reason == "rq-refused"
    assert "message too large" in meta.failure.error
    state = states.get("g")
    assert state is not None and state.dlq.p is not None, "the group is recorded as dead-lettered"


async def test_a_copy_dlq_refuses_too_leaves_a_stub_naming_the_source() -> None:
    refused = RecordRefused("too large")
    broker, states = Broker({"rq": refused, "dlq": refused}), MemoryStates()
    await delivery(broker, states).process([main_work(record("g", 7), 0, 256)])
    [(queue, _group, stub, meta)] = broker.written
    assert queue == "dlq" and stub.value == b"" and stub.headers == []
    assert meta.failure is not None and meta.failure.reason == "dlq-refused"
    assert "mq.0[0]@7" in meta.failure.error
    state = states.get("g")
    assert state is not None and state.dlq.p is not None


async def test_a_copy_not_confirmed_still_fails_the_poll() -> None:
    broker = Broker({"rq": ProduceFailed("rq.0[0]: timed out")})
    with pytest.raises(ProduceFailed):
        await delivery(broker, MemoryStates()).process([main_work(record("g", 7), 0, 256)])
    assert broker.written == []


def test_refusals_of_the_record_itself_are_told_apart_from_transient_failures() -> None:
    assert type(produce_failed("t[0]", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))) is RecordRefused
    assert type(produce_failed("t[0]", KafkaError(KafkaError.INVALID_RECORD))) is RecordRefused
    assert type(produce_failed("t[0]", KafkaError(KafkaError._MSG_TIMED_OUT))) is ProduceFailed
    assert type(produce_failed("t[0]", KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))) is ProduceFailed
