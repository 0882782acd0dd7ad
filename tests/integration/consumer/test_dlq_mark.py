"""The DLQ mark on the broker: a copy that stops writes, per partition, the DLQ offset below which
every dead letter is recorded in its key's state; the next copy reads the DLQ only from there to
adopt orphans, and the promise holds for the records produced in between."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from app.consumer.orphans import DLQ_MARK_KEY
from app.kafka.broker import BrokerPort, broker_for
from app.kafka.reading import read_from
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, dead_lettered, fill, wait_until
from tests.integration.consumer.processes import Copies
from tests.support.consumer_handler import permanent

pytestmark = [pytest.mark.integration]

KEYS, PER_KEY, PARTITIONS = 400, 3, 4


def _marks(broker: BrokerPort, name: str) -> dict[int, int]:
    starts = {(f"{name}-state", p): 0 for p in range(PARTITIONS)}
    found: dict[int, int] = {}
    for msg in read_from(broker, starts):
        if msg.key() == DLQ_MARK_KEY and msg.value() is not None:
            found[msg.partition()] = max(found.get(msg.partition(), 0), orjson.loads(msg.value())["dlq_from"])
    return found


async def test_the_next_copy_reads_the_dlq_from_the_mark(
    kafka: Settings, unique: str, tmp_path: Path
) -> None:
    copies = Copies(tmp_path, kafka.bootstrap, f"dm-{unique}", f"dm-{unique}")
    total = fill(kafka.bootstrap, copies.topic, PARTITIONS, KEYS, PER_KEY)
    dead_per_round = len([k for k in range(KEYS) if permanent(f"k{k}", 1)]) * (PER_KEY - 1)

    def outcome(n: int) -> bool:
        dead = sum(len(v) for v in dead_lettered(copies.broker, copies.name).values())
        return len(set(copies.handled())) + dead >= n

    try:
        copies.start("first", "--concurrency", "8")
        await wait_until(lambda: outcome(total), 180, "the first round handled or dead-lettered")
        assert copies.stop("first") == 0, copies.log_tail("first")
        dlq_ends = broker_for(kafka).end_offsets([(f"{copies.name}-dlq", p) for p in range(PARTITIONS)])
        marks = await asyncio.to_thread(_marks, broker_for(kafka), copies.name)
        assert sum(dlq_ends) == dead_per_round
        assert marks == {p: end for p, end in enumerate(dlq_ends) if end > 0}  # every dead letter recorded
        # A second round: the same keys and values again, each handled a second time
        fill(kafka.bootstrap, copies.topic, PARTITIONS, KEYS, PER_KEY)
        copies.start("second", "--concurrency", "8")
        await wait_until(
            lambda: "read from the DLQ mark" in copies.log_tail("second"), 60, "second's DLQ read"
        )
        blocked = dead_per_round // (PER_KEY - 1)  # their later records follow to the DLQ
        await wait_until(
            lambda: copies.handled_by("second") >= (KEYS - blocked) * PER_KEY, 180, "the second round handled"
        )
        assert copies.stop("second") == 0, copies.log_tail("second")
    finally:
        copies.stop_all()
    log = (tmp_path / "second.log").read_text()
    for p, end in enumerate(dlq_ends):
        assert f"{copies.name}-dlq[{p}] read from the DLQ mark {end} to {end}" in log, log[-2000:]
    dead = await asyncio.to_thread(dead_lettered, broker_for(kafka), copies.name)
    check_outcome(copies.handled(), dead, KEYS, PER_KEY)
    assert sum(len(v) for v in dead.values()) >= dead_per_round
