"""The ack agent's handling of one record never lets an error escape (Faust would acknowledge the
record and the rest of its batch): a partition not served here is waited for, then re-queued; a
failing broker is retried; every send is confirmed before the record counts as handled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import orjson

from app import crashpoints
from app.batch.ack_handler import (
    FIRST_SEEN_HEADER,
    RETRY_UNKNOWN_S,
    UNKNOWN_GRACE_S,
    AckRecord,
    apply_ack_record,
)
from app.batch.errors import ItemNotFound, PartitionNotReady
from app.batch.exact import AckOutcome, SortedAcks
from app.batch.ids import GroupAcks
from app.errors import ServiceUnavailable

GROUP = "0b9e1f44-6d0c-4a53-9d52-0c1f3c4f2a10"


class FakeTopic:
    def __init__(self, name: str, fail_sends: int = 0) -> None:
        self.name = name
        self.sent: list[dict[str, Any]] = []
        self.confirmed = 0
        self.fail_sends = fail_sends

    def get_topic_name(self) -> str:
        return self.name

    async def send(self, **record: Any) -> asyncio.Future[None]:
        if self.fail_sends:
            self.fail_sends -= 1
            raise ServiceUnavailable("broker down")
        self.sent.append(record)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def confirm() -> None:
            self.confirmed += 1
            done.set_result(None)

        asyncio.get_running_loop().call_soon(confirm)
        return done


class FakeService:
    """Batch 8 lives in partition 0; `ready` says which partitions are served here."""

    def __init__(
        self,
        ready: set[int],
        restored_after: int = 0,
        in_recovery: bool = False,
        gone: frozenset[int] = frozenset(),
    ) -> None:
        self.ready = ready
        self.gone = gone  # batches that existed and were deleted
        self.applied: list[GroupAcks] = []
        self.restored_after = restored_after  # ack calls that find the item group not restored yet
        self.in_recovery = in_recovery
        self.waits = 0

    def split_by_partition(self, acks: Sequence[GroupAcks]) -> dict[int, list[GroupAcks]]:
        return {0: list(acks)}

    def sort_acks(self, partition: int, acks: Sequence[GroupAcks]) -> SortedAcks:
        if partition not in self.ready or self.in_recovery:
            raise PartitionNotReady(f"partition {partition} not served here")
        valid = tuple(a for a in acks if a.batch_id not in self.gone)
        refused = tuple(
            (a, f"exact batch {a.batch_id} no longer exists") for a in acks if a.batch_id in self.gone
        )
        return SortedAcks(valid, gone=refused)

    def ack(self, partition: int, acks: Sequence[GroupAcks]) -> AckOutcome:
        if partition not in self.ready or self.in_recovery:
            raise PartitionNotReady(f"partition {partition} not served here")
        if self.restored_after:
            self.restored_after -= 1
            raise ItemNotFound("item group 8:... does not exist")
        self.applied.extend(acks)
        return AckOutcome(sum(len(a.indexes) for a in acks), ())

    async def publish(self, completions: object) -> None:
        return None

    def recovering(self) -> bool:
        return self.in_recovery

    async def wait_ready(self, partition: int, timeout_s: float) -> bool:
        self.waits += 1
        await asyncio.sleep(0)
        self.in_recovery = False  # the recovery ends while we wait
        return partition in self.ready


VALUE = orjson.dumps({"batchItemIds": [f"8:{GROUP}:0", f"8:{GROUP}:1"]})


async def test_a_record_for_a_partition_served_here_is_applied() -> None:
    service, acks, dlq = FakeService({0}), FakeTopic("batch-acks"), FakeTopic("dlq")
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE)) == 2  # type: ignore[arg-type]
    assert acks.sent == [] and dlq.sent == []


async def test_a_record_whose_partition_is_not_served_here_is_requeued_and_confirmed() -> None:
    service, acks, dlq = FakeService(set()), FakeTopic("batch-acks"), FakeTopic("dlq")
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE)) == 0  # type: ignore[arg-type]
    assert acks.sent == [{"key": b"8", "value": VALUE, "partition": 0}]
    assert acks.confirmed == 1, "re-queued and confirmed by the broker before the record counts as handled"


async def test_a_send_that_fails_is_tried_again_not_raised_out_of_the_agent() -> None:
    service, acks, dlq = FakeService(set()), FakeTopic("batch-acks", fail_sends=2), FakeTopic("dlq")
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE)) == 0  # type: ignore[arg-type]
    assert acks.confirmed == 1


async def test_a_bad_record_is_dead_lettered_with_its_reason_and_confirmed() -> None:
    service, acks, dlq = FakeService({0}), FakeTopic("batch-acks"), FakeTopic("dlq")
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", b"not json")) == 0  # type: ignore[arg-type]
    assert dlq.confirmed == 1
    assert dlq.sent[0]["headers"]["source"] == b"batch-acks[0] offset=5"


async def test_a_crash_point_failure_on_the_requeue_is_tried_again() -> None:
    service, acks, dlq = FakeService(set()), FakeTopic("batch-acks"), FakeTopic("dlq")
    with crashpoints.armed("batch.ack_record.send", nth=1, action="raise") as trigger:
        assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE)) == 0  # type: ignore[arg-type]
    assert trigger.fired and trigger.hits == 2
    assert acks.confirmed == 1


async def test_an_unknown_item_group_is_requeued_with_when_it_was_first_seen() -> None:
    service = FakeService({0}, restored_after=1)
    acks, dlq = FakeTopic("batch-acks"), FakeTopic("dlq")
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE)) == 0  # type: ignore[arg-type]
    assert dlq.sent == [] and acks.confirmed == 1
    [requeued] = acks.sent
    first_seen = requeued["headers"][FIRST_SEEN_HEADER]
    # The copy comes back (now restored here, or read by the partition's new owner): applied.
    copy = AckRecord(0, 6, b"8", VALUE, [(FIRST_SEEN_HEADER, first_seen)])
    again = await apply_ack_record(service, acks, dlq, copy)  # type: ignore[arg-type]
    assert again == 2 and dlq.sent == []


async def test_an_unknown_item_group_past_the_grace_period_is_dead_lettered() -> None:
    service = FakeService({0}, restored_after=1)
    acks, dlq = FakeTopic("batch-acks"), FakeTopic("dlq")
    long_ago = str(int(time.time() * 1000) - int(UNKNOWN_GRACE_S * 1000) - 1).encode()
    headers = [(FIRST_SEEN_HEADER, long_ago)]
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE, headers)) == 0  # type: ignore[arg-type]
    assert b"ItemNotFound" in dlq.sent[0]["headers"]["reason"]
    assert acks.sent == []


async def test_a_record_waits_while_this_worker_recovers_its_partitions() -> None:
    service = FakeService({0}, in_recovery=True)
    acks, dlq = FakeTopic("batch-acks"), FakeTopic("dlq")
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE)) == 2  # type: ignore[arg-type]
    assert service.waits == 1 and acks.sent == []


async def test_a_record_of_a_partition_not_assigned_here_is_requeued_without_waiting() -> None:
    service = FakeService(set())
    acks, dlq = FakeTopic("batch-acks"), FakeTopic("dlq")
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", VALUE)) == 0  # type: ignore[arg-type]
    assert service.waits == 0, "a rebalance waits for the agent: never hold a revoked record"
    assert acks.confirmed == 1


async def test_acks_of_a_gone_batch_are_dead_lettered_at_once_and_the_rest_applied() -> None:
    """A batch id the partition handed out and no longer holds is never waited for: before, such a
    record was re-queued every 0.5 s for 15 s, holding every later ack of its partition."""
    service = FakeService({0}, gone=frozenset({4}))
    acks, dlq = FakeTopic("batch-acks"), FakeTopic("dlq")
    value = orjson.dumps({"batchItemIds": [f"4:{GROUP}:0", f"8:{GROUP}:0", f"8:{GROUP}:1"]})
    started = asyncio.get_running_loop().time()
    assert await apply_ack_record(service, acks, dlq, AckRecord(0, 5, b"8", value)) == 2  # type: ignore[arg-type]
    assert asyncio.get_running_loop().time() - started < RETRY_UNKNOWN_S, "no wait before the next record"
    assert acks.sent == [], "nothing re-queued"
    [dead] = dlq.sent
    assert orjson.loads(dead["value"]) == {"batchItemIds": [f"4:{GROUP}:0"]}
    assert b"no longer exists" in dead["headers"]["reason"]
    assert orjson.loads(dead["headers"]["reasons"]) == {f"4:{GROUP}": "exact batch 4 no longer exists"}
    assert service.applied == [GroupAcks(8, GROUP, (0, 1))]
