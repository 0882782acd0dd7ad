"""Copies of a library consumer as processes: scaled 1 -> 3 -> 1 with one copy killed with
SIGKILL mid-run, and a copy killed at each of its crash points then started again. Afterwards
every record was handled or dead-lettered, each key's first handlings are in order, nothing
follows a key's dead letter, and duplicates (redeliveries of work in flight at the kill) are
counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.kafka.broker import broker_for
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, dead_lettered, fill, wait_until
from tests.integration.consumer.processes import Copies
from tests.support.consumer_handler import permanent
from tests.support.soak import first_in_every_suite

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

KEYS, PER_KEY, PARTITIONS = 2_000, 3, 8


def _outcome_ready(copies: Copies, total: int) -> bool:
    return len(set(copies.handled())) + _dead_count(copies) >= total


def _dead_count(copies: Copies) -> int:
    return sum(len(v) for v in dead_lettered(copies.broker, copies.name).values())


async def test_scale_out_kill_one_scale_in(kafka: Settings, unique: str, tmp_path: Path) -> None:
    copies = Copies(tmp_path, kafka.bootstrap, f"k9-{unique}", f"k9-{unique}")
    total = fill(kafka.bootstrap, copies.topic, PARTITIONS, KEYS, PER_KEY)
    expected_dead = len([k for k in range(KEYS) if permanent(f"k{k}", 1)]) * (PER_KEY - 1)
    slow = {"HS_TEST_DELAY_S": "0.05"}  # 8 in flight x 50 ms: ~160 records/s per copy
    try:
        copies.start("a", "--concurrency", "8", **slow)
        await wait_until(lambda: copies.handled_by("a") >= 300, 120, "copy a under way")
        copies.start("b", "--concurrency", "8", **slow)
        copies.start("c", "--concurrency", "8", **slow)
        await wait_until(
            lambda: copies.handled_by("b") >= 100 and copies.handled_by("c") >= 100,
            120,
            "three copies at work",
        )
        copies.kill9("b")
        at_kill = {label: copies.handled_by(label) for label in ("a", "c")}
        await wait_until(
            lambda: all(copies.handled_by(label) >= n + 200 for label, n in at_kill.items()),
            120,
            "a and c at work after the kill",
        )
        assert copies.stop("c") == 0, copies.log_tail("c")
        at_stop = copies.handled_by("a")
        await wait_until(lambda: copies.handled_by("a") >= at_stop + 200, 120, "a alone at work")
        await wait_until(lambda: _outcome_ready(copies, total), 240, "every record handled or dead-lettered")
        assert copies.stop("a") == 0, copies.log_tail("a")
    finally:
        copies.stop_all()
    handled = copies.handled()
    dead = await asyncio.to_thread(dead_lettered, broker_for(kafka), copies.name)
    duplicates = check_outcome(handled, dead, KEYS, PER_KEY)
    assert sum(len(v) for v in dead.values()) >= expected_dead
    by_copy = {label: copies.handled_by(label) for label in ("a", "b", "c")}
    print(f"\n{total} records, 1 -> 3 copies, kill -9 b, 1 copy: by copy {by_copy}, duplicates {duplicates}")


POINTS = [
    "consumer.retry.confirmed:3",
    # under `-m soak` (the DLQ mark is cut in every suite by tests/integration/consumer/
    # test_dlq_mark.py, the owner claim only here, the others in-process by
    # tests/unit/consumer/test_crash_points.py)
    "consumer.dlq.mark:1",
    "consumer.owner.claim:2",
    "consumer.state.forget:2",
    "consumer.dlq.confirmed:2",
    "consumer.state.write:4",
    "consumer.offsets.commit:2",
]


@pytest.mark.parametrize("point", first_in_every_suite(POINTS, 1))
async def test_a_copy_killed_at_a_crash_point_restarts_and_keeps_the_promise(
    kafka: Settings, unique: str, tmp_path: Path, point: str
) -> None:
    keys, per_key = 300, 3
    copies = Copies(tmp_path, kafka.bootstrap, f"cp-{unique}", f"cp-{unique}")
    total = fill(kafka.bootstrap, copies.topic, 4, keys, per_key)
    try:
        first = copies.start("first", "--concurrency", "8", HUBSTREAM_CRASH_AT=f"{point}:kill")
        await asyncio.to_thread(first.wait, 120)
        assert first.returncode == -9, f"the copy did not die at {point}: {copies.log_tail('first')}"
        copies.procs.pop("first")
        copies.start("second", "--concurrency", "8")
        # The restarted copy must be up (owning the partitions: a SIGTERM then stops it cleanly) even
        # when the first one handled everything before it died.
        await wait_until(
            lambda: copies.logged("second", "owns partitions") and _outcome_ready(copies, total),
            180,
            "the second copy to own the partitions and every record handled or dead-lettered",
        )
        assert copies.stop("second") == 0, copies.log_tail("second")
    finally:
        copies.stop_all()
    dead = await asyncio.to_thread(dead_lettered, broker_for(kafka), copies.name)
    duplicates = check_outcome(copies.handled(), dead, keys, per_key)
    for key, entries in dead.items():
        seqs = [seq for seq, _ in entries]
        assert len(seqs) == len(set(seqs)), f"{key} dead-lettered twice: {entries}"
    print(f"\n{point}: {total} records, duplicates {duplicates}")
