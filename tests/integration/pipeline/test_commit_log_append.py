"""Appends to the Kafka commit log in bulk records: the entry numbers a confirmed batch gives must
be where its entries are read back, also with several appends in flight, batches of one entry,
a batch split over several records, and a second log object appending after the first; a cursor
from any number starts at that entry."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from app.errors import ServiceUnavailable
from app.kafka.broker import broker_for
from app.pipeline.kafka_log import KafkaCommitLog, log_end, read_log_range
from app.pipeline.log_records import COUNT_HEADER, FIRST_HEADER
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.settings import Settings

pytestmark = pytest.mark.integration

SIZES = [1000, 1, 2, 500, 1000]


def batch(start: int, size: int, namespace: str = "ns") -> list[NewEntry]:
    return [
        NewEntry(Message(Op.INSERT, 1, namespace, {"id": f"r{i}"}), Mode.SYNC, {"line": i + 1}, f"r{i}")
        for i in range(start, start + size)
    ]


async def append_all(log: KafkaCommitLog, batches: list[list[NewEntry]]) -> list[list[int]]:
    await log.prepare_append()
    pending = [await log.start_append(b) for b in batches]  # all handed over before any is confirmed
    try:
        return list(await asyncio.gather(*pending))
    finally:
        await log.close()


async def from_cursor(log: KafkaCommitLog, start: int, count: int) -> list[int]:
    cursor = log.cursor(start)
    got: list[int] = []
    try:
        while len(got) < count:
            batch_ = await cursor.next_batch(count - len(got), 2.0)
            assert batch_, f"the cursor from {start} stopped after {len(got)} of {count} entries"
            got.extend(entry.offset for entry in batch_)
    finally:
        await cursor.close()
    return got


@pytest.mark.timeout(180)
def test_confirmed_numbers_are_where_the_entries_are(stack: Settings, unique: str) -> None:
    topic = f"append-log-{unique}"
    first_log = KafkaCommitLog(broker_for(stack), topic)
    first_log.ensure_topic()
    batches, start = [], 0
    for size in SIZES:
        batches.append(batch(start, size))
        start += size
    confirmed = asyncio.run(append_all(first_log, batches))
    # A second appender (a restart) numbers on from the log's end; its batch is split into records
    # of at most 2,000 bytes and switches namespace halfway.
    second_log = KafkaCommitLog(broker_for(stack), topic, max_message_bytes=2000)
    mixed = batch(start, 40) + batch(start + 40, 40, namespace="other")
    confirmed += asyncio.run(append_all(second_log, [mixed]))
    total = start + len(mixed)

    assert [len(numbers) for numbers in confirmed] == [*SIZES, len(mixed)]
    flat = [n for numbers in confirmed for n in numbers]
    assert flat == list(range(total)), "numbers follow on, in hand-over order, across appenders"
    assert log_end(broker_for(stack), topic) == total
    entries = read_log_range(broker_for(stack), topic, 0, total - 1)
    assert {e.value.data["id"]: e.offset for e in entries} == {f"r{i}": i for i in range(total)}
    assert [e.key for e in entries[-41:-39]] == ["ns", "other"] and entries[0].doc_key == "r0"
    assert [e.offset for e in read_log_range(broker_for(stack), topic, 1500, 1504)] == list(range(1500, 1505))

    async def cursors() -> None:
        reader = KafkaCommitLog(broker_for(stack), topic)
        for start_at in (0, 1, 1000, 1001, 1003, 2502, total - 3):  # inside records and at their starts
            assert await from_cursor(reader, start_at, min(5, total - start_at)) == list(
                range(start_at, min(start_at + 5, total))
            )

    asyncio.run(cursors())


@pytest.mark.timeout(120)
def test_records_that_are_not_log_entries_are_passed_over_and_a_second_writer_is_caught(
    stack: Settings, unique: str
) -> None:
    """A record without entry numbers (another program wrote the topic) takes no number and is
    skipped; a numbered record whose value is unreadable keeps its numbers as commands writers
    acknowledge without writing. An append that finds another producer's record after its own
    previous one fails, and the next append numbers on from the log's end."""
    topic = f"foreign-log-{unique}"
    log = KafkaCommitLog(broker_for(stack), topic)
    log.ensure_topic()
    foreign = Producer({"bootstrap.servers": stack.bootstrap})

    def write_foreign() -> None:
        foreign.produce(topic, b"not an entry", b"x", 0)
        foreign.produce(topic, b"[1, 2", b"ns", 0, headers=[(FIRST_HEADER, b"10"), (COUNT_HEADER, b"2")])
        assert foreign.flush(10) == 0

    async def scenario() -> tuple[list[int], BaseException | None, list[int]]:
        await log.prepare_append()
        try:
            first = await (await log.start_append(batch(0, 10)))
            write_foreign()
            failed = None
            try:
                await (await log.start_append(batch(100, 3)))
            except ServiceUnavailable as exc:
                failed = exc
            after = await (await log.start_append(batch(200, 5)))
            return first, failed, after
        finally:
            await log.close()

    first, failed, after = asyncio.run(scenario())
    assert first == list(range(10))
    assert failed is not None and "another producer" in str(failed)
    # The refused batch's record landed after the foreign ones (numbers 10-12, now shadowed by the
    # foreign record's 10-11): the appender read the end again and numbers on after it.
    assert after == list(range(13, 18))
    entries = read_log_range(broker_for(stack), topic, 0, 17)
    assert [e.offset for e in entries] == list(range(18))
    assert [e.is_command for e in entries[10:12]] == [True, True], "the unreadable record's numbers"
    assert entries[12].value.data["id"] == "r102" and entries[13].value.data["id"] == "r200"
    # The end is read from the last record back; records without numbers there widen the look.
    for _ in range(3):
        foreign.produce(topic, b"not an entry", b"tail", 0)
    assert foreign.flush(10) == 0
    assert log_end(broker_for(stack), topic) == 18
