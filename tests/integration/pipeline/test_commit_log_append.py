"""Appends to the Kafka commit log report only each batch's first and last record; the offsets a
confirmed batch gives must be exactly where its entries are in the log, also with several appends
in flight and batches of one entry."""

from __future__ import annotations

import asyncio

import pytest

from app.pipeline.kafka_log import KafkaCommitLog, read_log_range
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.settings import Settings

pytestmark = pytest.mark.integration

SIZES = [1000, 1, 2, 500, 1000]


def batch(start: int, size: int) -> list[NewEntry]:
    return [
        NewEntry(Message(Op.INSERT, 1, "ns", {"id": f"r{i}"}), Mode.SYNC, {"line": i + 1}, f"r{i}")
        for i in range(start, start + size)
    ]


@pytest.mark.timeout(120)
def test_confirmed_offsets_are_where_the_entries_are(stack: Settings, unique: str) -> None:
    log = KafkaCommitLog(stack.bootstrap, f"append-log-{unique}")
    log.ensure_topic()

    async def append_all() -> list[list[int]]:
        await log.prepare_append()
        pending = []
        start = 0
        for size in SIZES:  # every batch handed over before the first is confirmed
            pending.append(await log.start_append(batch(start, size)))
            start += size
        try:
            return list(await asyncio.gather(*pending))
        finally:
            await log.close()

    confirmed = asyncio.run(append_all())
    total = sum(SIZES)
    assert [len(offsets) for offsets in confirmed] == SIZES
    flat = [offset for offsets in confirmed for offset in offsets]
    assert flat == list(range(flat[0], flat[0] + total)), "the batches follow on, in hand-over order"
    entries = read_log_range(stack.bootstrap, log.topic, 0, flat[-1])
    where = {entry.value.data["id"]: entry.offset for entry in entries}
    assert where == {f"r{i}": offset for i, offset in enumerate(flat)}
    assert [entry.record_key for entry in entries[:2]] == [b"ns\x00r0", b"ns\x00r1"]
