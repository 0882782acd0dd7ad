"""A commit-log batch is confirmed from the reports of its first and last record only: whole when
its ends landed count - 1 offsets apart, failed on any error or gap."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError

from app.errors import ServiceUnavailable
from app.kafka.producing import ProduceFailed
from app.pipeline.kafka_log import BatchDelivery

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


async def outcome(count: int, *reports: tuple[KafkaError | None, Report]) -> list[int] | BaseException:
    delivery = BatchDelivery(TOPIC, count, asyncio.get_running_loop())
    for err, msg in reports:
        delivery(err, msg)
    try:
        return await asyncio.wait_for(delivery.confirmed, 1)
    except (ServiceUnavailable, ProduceFailed) as exc:
        return exc


@pytest.mark.parametrize("order", ["first-then-last", "last-then-first"])
async def test_ends_count_minus_one_apart_confirm_the_run_between(order: str) -> None:
    ends = [(None, Report(40)), (None, Report(44))]
    if order == "last-then-first":
        ends.reverse()
    assert await outcome(5, *ends) == [40, 41, 42, 43, 44]


async def test_a_single_record_is_its_own_first_and_last() -> None:
    assert await outcome(1, (None, Report(7))) == [7]


async def test_an_empty_batch_is_confirmed_at_once() -> None:
    assert await outcome(0) == []


async def test_ends_further_apart_mean_a_record_is_missing_or_another_producer_wrote() -> None:
    failed = await outcome(5, (None, Report(40)), (None, Report(45)))
    assert isinstance(failed, ServiceUnavailable) and "40..45" in str(failed)


@pytest.mark.parametrize("failing", [0, 1])
async def test_an_error_on_either_end_fails_the_batch(failing: int) -> None:
    reports: list[tuple[KafkaError | None, Report]] = [(None, Report(40)), (None, Report(44))]
    reports[failing] = (KafkaError(KafkaError._MSG_TIMED_OUT), reports[failing][1])
    assert isinstance(await outcome(5, *reports), ProduceFailed)


async def test_a_report_for_another_partition_fails_the_batch() -> None:
    failed = await outcome(2, (None, Report(1)), (None, Report(2, _partition=3)))
    assert isinstance(failed, ServiceUnavailable)
