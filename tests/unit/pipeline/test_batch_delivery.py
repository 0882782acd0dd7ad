"""An appended batch is confirmed with its entry numbers once each of its records is, every record
right after the one before in the partition (and after the previous batch's last); an error or a
gap (a lost record, another producer writing the log) fails it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError

from app.errors import ServiceUnavailable
from app.kafka.producing import ProduceFailed
from app.pipeline.kafka_log import BatchDelivery, Chain

TOPIC = "hubstream.pipeline.p.log"


@dataclass
class Report:
    """What the producer hands a delivery callback."""

    _offset: int
    _topic: str = TOPIC
    _partition: int = 0

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


Reports = list[tuple[KafkaError | None, Report]]


async def outcome(
    first: int, count: int, reports: Reports, chain: Chain | None = None, records: int | None = None
) -> list[int] | BaseException:
    chain = chain or Chain()
    records = len(reports) if records is None else records
    delivery = BatchDelivery(TOPIC, first, count, records, chain, asyncio.get_running_loop())
    for err, msg in reports:
        delivery(err, msg)
    try:
        return await asyncio.wait_for(delivery.confirmed, 1)
    except (ServiceUnavailable, ProduceFailed) as exc:
        return exc


async def test_every_record_confirmed_gives_the_batch_its_entry_numbers() -> None:
    reports: Reports = [(None, Report(7)), (None, Report(8)), (None, Report(9))]
    assert await outcome(1000, 5, reports) == [1000, 1001, 1002, 1003, 1004]


async def test_a_batch_is_not_confirmed_before_its_last_record() -> None:
    delivery = BatchDelivery(TOPIC, 0, 3, 2, Chain(), asyncio.get_running_loop())
    delivery(None, Report(4))
    await asyncio.sleep(0)
    assert not delivery.confirmed.done()


async def test_an_empty_batch_is_confirmed_at_once() -> None:
    assert await outcome(3, 0, []) == []


async def test_a_record_missing_between_two_fails_the_batch() -> None:
    failed = await outcome(0, 9, [(None, Report(7)), (None, Report(9)), (None, Report(10))])
    assert isinstance(failed, ServiceUnavailable) and "9, 8 expected" in str(failed)


async def test_batches_follow_on_across_the_chain() -> None:
    chain = Chain()
    assert await outcome(0, 2, [(None, Report(5)), (None, Report(6))], chain) == [0, 1]
    assert await outcome(2, 1, [(None, Report(7))], chain) == [2]
    failed = await outcome(3, 1, [(None, Report(9))], chain)  # another producer wrote offset 8
    assert isinstance(failed, ServiceUnavailable) and "another producer" in str(failed)
    assert chain.end is None, "unknown until the appender reads the log's end again"


@pytest.mark.parametrize("failing", [0, 1])
async def test_an_error_on_any_record_fails_the_batch(failing: int) -> None:
    reports: Reports = [(None, Report(40)), (None, Report(41))]
    reports[failing] = (KafkaError(KafkaError._MSG_TIMED_OUT), reports[failing][1])
    assert isinstance(await outcome(0, 2, reports), ProduceFailed)


async def test_a_report_for_another_partition_fails_the_batch() -> None:
    failed = await outcome(0, 2, [(None, Report(1)), (None, Report(2, _partition=3))])
    assert isinstance(failed, ServiceUnavailable)
