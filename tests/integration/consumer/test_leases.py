"""Library copies hold a lease per partition (`app.ordered.lease`), as processes:

- a copy paused (SIGSTOP) past its session timeout while another takes its partitions over, then
  resumed (SIGCONT): its lease has run out, so it hands nothing more to its handler, writes no
  copy or state and commits nothing for those partitions. Counted at the handler: every record
  handled or dead-lettered, per key no older record after a newer one unless the whole run after
  it follows again, and every key ends on its newest handled record;
- a copy killed at the write of its release (`consumer.owner.release`) when it stops: the next
  copy waits one lease for the partitions never released, then owns them and handles the rest.
"""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from pathlib import Path

import pytest

from app.kafka.broker import broker_for
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, dead_lettered, fill, wait_until
from tests.integration.consumer.processes import Copies
from tests.unit.modelcheck.endpoint_order import Seen

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

KEYS, PER_KEY, PARTITIONS = 600, 5, 4


def _done(copies: Copies, total: int) -> bool:
    dead = sum(len(v) for v in dead_lettered(copies.broker, copies.name).values())
    return len(set(copies.handled())) + dead >= total


async def test_a_paused_copy_resumed_after_its_takeover_handles_nothing_stale(
    kafka: Settings, unique: str, tmp_path: Path
) -> None:
    copies = Copies(tmp_path, kafka.bootstrap, f"lp-{unique}", f"lp-{unique}")
    total = fill(kafka.bootstrap, copies.topic, PARTITIONS, KEYS, PER_KEY)
    slow = {"HS_TEST_DELAY_S": "0.05"}  # 8 in flight x 50 ms: ~160 records/s per copy
    try:
        a = copies.start("a", "--concurrency", "8", **slow)
        copies.start("b", "--concurrency", "8", **slow)
        await wait_until(
            lambda: copies.handled_by("a") >= 100 and copies.handled_by("b") >= 100,
            120,
            "both copies at work",
        )
        a.send_signal(signal.SIGSTOP)
        try:
            at_pause = copies.handled_by("b")
            await wait_until(  # b owns every partition now, a's too: past a's session and lease
                lambda: (
                    copies.logged("b", "owns partitions [0, 1, 2, 3]")
                    and copies.handled_by("b") >= at_pause + 200
                ),
                120,
                "b handling a's partitions too",
            )
        finally:
            a.send_signal(signal.SIGCONT)
        await wait_until(lambda: _done(copies, total), 300, "every record handled or dead-lettered")
        assert copies.stop("b") == 0, copies.log_tail("b")
        assert copies.stop("a") == 0, copies.log_tail("a")
    finally:
        copies.stop_all()
    handled = copies.handled()
    dead = await asyncio.to_thread(dead_lettered, broker_for(kafka), copies.name)
    duplicates = check_outcome(handled, dead, KEYS, PER_KEY)
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, seq in handled:
        by_key[key].append(seq)
    for key, seqs in by_key.items():
        seen = Seen()
        for seq in seqs:
            seen = seen.took(seq)
        assert seen.broken is None, f"{key}: {seen.broken}: {seqs}"
        assert not seen.expect, f"{key}: a replay never caught up: {seqs}"
        assert seqs[-1] == max(seqs), f"{key} ends on {seqs[-1]}, not on {max(seqs)}: {seqs}"
    print(f"\n{total} records, copy a paused past its takeover and resumed: duplicates {duplicates}")


async def test_a_copy_killed_at_its_release_makes_the_next_wait_one_lease(
    kafka: Settings, unique: str, tmp_path: Path
) -> None:
    copies = Copies(tmp_path, kafka.bootstrap, f"lr-{unique}", f"lr-{unique}")
    total = fill(kafka.bootstrap, copies.topic, PARTITIONS, 200, 3)
    try:
        first = copies.start(
            "first", "--concurrency", "8", HUBSTREAM_CRASH_AT="consumer.owner.release:1:kill"
        )
        await wait_until(lambda: _done(copies, total), 180, "the first copy handling everything")
        first.send_signal(signal.SIGTERM)
        await asyncio.to_thread(first.wait, 60)
        assert first.returncode == -9, f"the copy did not die at its release: {copies.log_tail('first')}"
        copies.procs.pop("first")
        copies.start("second", "--concurrency", "8")
        await wait_until(lambda: copies.logged("second", "owns partitions"), 120, "the second copy owning")
        assert copies.logged("second", "not released"), copies.log_tail("second")  # it waited
        assert copies.stop("second") == 0, copies.log_tail("second")
    finally:
        copies.stop_all()
    dead = await asyncio.to_thread(dead_lettered, broker_for(kafka), copies.name)
    check_outcome(copies.handled(), dead, 200, 3)
