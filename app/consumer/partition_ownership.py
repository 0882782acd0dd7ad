"""The ownership part of a running copy (`KeyedConsumer`, app.consumer.kafka): taking over the
partitions assigned (their leases, key states and orphaned retry/DLQ copies), draining and handing
back those revoked, and whether its lease lets the copy act on a partition now."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from app.consumer.model import ConsumerSettings
from app.consumer.orphans import DlqMark, adopt_copies, copy_at
from app.consumer.parts import TP, Commit, Item, Lane
from app.consumer.periodic import _commit_of
from app.consumer.queues import KafkaStateLog
from app.consumer.stats import ConsumerStats
from app.errors import HubstreamError
from app.kafka.broker import broker_for
from app.kafka.reading import read_from
from app.ordered.lease import LaneLost, Lease
from app.ordered.orphans import Copy, Queue
from app.ordered.ownership import LaneOwnership
from app.ordered.progress import KeyLanes, OffsetTracker
from app.ordered.work import Work

__all__ = ["PartitionOwnership"]

log = logging.getLogger(__name__)


class PartitionOwnership:
    """The ownership part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    stats: ConsumerStats
    _owned: set[int]
    _trackers: dict[TP, OffsetTracker]
    _committed: dict[TP, Commit]
    _resumed: dict[TP, frozenset[int]]
    _lanes: KeyLanes[Lane, Item]
    _lane_ended: asyncio.Event
    _workers: dict[asyncio.Task[None], Item | None]
    _retry_wait: dict[int, deque[tuple[Work, TP]]]
    _retry_paused: set[int]
    _states: KafkaStateLog
    _ownership: LaneOwnership
    _leases: dict[int, Lease]

    if TYPE_CHECKING:  # other parts' methods (stubs left at run time would hide them)

        @property
        def _lane_topic(self) -> str: ...
        def _lane_of(self, tp: TP) -> int: ...
        def _purge_inbox(self, partitions: set[int]) -> None: ...
        def _spawn_worker(self) -> None: ...
        async def _write_dlq_marks(self) -> None: ...

    # -- event loop: ownership -------------------------------------------------------------------
    async def _claim_partitions(self, mains: list[int]) -> None:
        """This copy's leases of `mains`, before anything of them is read: committed offsets
        too, so that a previous owner still finishing them (a rebalance hands partitions over
        while they are drained) has committed and released first, or can act no more."""
        claims = await asyncio.gather(
            *(self._ownership.acquire(self._lane(p)) for p in mains), return_exceptions=True
        )
        for p, claim in zip(mains, claims, strict=True):
            if isinstance(claim, Lease):
                self._leases[p] = claim
            elif isinstance(claim, Exception):  # a later claim came first: not this copy's
                log.warning("%s: partition %d not taken: %s", self.member_id, p, claim)
            else:
                raise claim

    async def _assign(
        self, mains: list[int], retry_from: dict[int, int], resumed: dict[TP, frozenset[int]]
    ) -> None:
        """Take over `mains` (claimed by `_claim_partitions`): their key states, DLQ marks and
        the retry/DLQ copies a crash left unrecorded."""
        self._resumed.update(resumed)
        await asyncio.to_thread(self._states.load, mains)
        dlq_from = {p: self._states.dlq_from.get(p, 0) for p in mains}
        copies, dlq_ends = await asyncio.to_thread(self._copies, mains, retry_from, dlq_from)
        adopted = 0
        for p, found in copies.items():
            adopted += await adopt_copies(self._states, p, found)
            self._states.dlq_marks[p] = DlqMark(dlq_ends[p])
        if adopted:
            log.warning("%s: recorded %d retry/DLQ copies written before a crash", self.member_id, adopted)
        self._owned.update(mains)
        log.info("%s: owns partitions %s of %s", self.member_id, sorted(self._owned), self.settings.source)

    def _copies(
        self, mains: list[int], retry_from: dict[int, int], dlq_from: dict[int, int]
    ) -> tuple[dict[int, list[Copy]], dict[int, int]]:
        """The retry copies not read yet and the DLQ copies from each partition's DLQ mark
        (blocking); and where each DLQ read ended."""
        s = self.settings
        found: dict[int, list[Copy]] = {p: [] for p in mains}
        dlq_ends = dict(dlq_from)
        plan: list[tuple[Queue, dict[tuple[str, int], int]]] = [
            ("rq", {(s.retry_topic, p): retry_from.get(p, 0) for p in mains}),
            ("dlq", {(s.dlq_topic, p): dlq_from[p] for p in mains}),
        ]
        for queue, starts in plan:
            for msg in read_from(broker_for(s), starts):
                if queue == "dlq":
                    dlq_ends[msg.partition()] = msg.offset() + 1
                copy = copy_at(queue, msg.offset(), msg.headers())
                if copy is not None:
                    found[msg.partition()].append(copy)
        for p in mains:
            log.info(
                "%s: %s[%d] read from the DLQ mark %d to %d",
                self.member_id,
                s.dlq_topic,
                p,
                dlq_from[p],
                dlq_ends[p],
            )
        return found, dlq_ends

    async def _revoke(self, tps: list[TP]) -> dict[TP, Commit]:
        mains = {p for t, p in tps if t == self._lane_topic}
        for p in mains:  # a successor's claim must not cut the drain short (`Lease.draining`)
            lease = self._leases.get(p)
            if lease is not None:
                lease.draining = True
        # Finish what was read of these partitions, the records waiting behind a busy key too:
        # a record left undone holds the commit below every later record that finished, and the
        # next owner would handle those again. Past revoke_timeout_s the rest is abandoned.
        self._purge_inbox(mains)
        deadline = time.monotonic() + self.settings.revoke_timeout_s
        while self._lanes.any_of(mains) and time.monotonic() < deadline:
            self._lane_ended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lane_ended.wait(), timeout=deadline - time.monotonic())
        self._owned -= mains  # what still waits is dropped; handlers still running are abandoned
        stuck = [task for task, on in self._workers.items() if on is not None and on[2][0] in mains]
        for task in stuck:
            task.cancel()
        if stuck:
            await asyncio.wait(stuck)
            self.stats.abandoned += len(stuck)
            for _ in stuck:
                self._spawn_worker()
        offsets = {}
        for tp in tps:
            tracker = self._trackers.pop(tp, None)
            commit = _commit_of(tracker, self._committed.get(tp)) if tracker is not None else None
            if commit is not None:
                offsets[tp] = commit
            self._committed.pop(tp, None)
            self._resumed.pop(tp, None)
        for p in mains:
            self._retry_wait.pop(p, None)
            self._retry_paused.discard(p)
        await self._write_dlq_marks()  # the next owner's adoption read starts there
        self._states.forget(mains)
        return {tp: o for tp, o in offsets.items() if self._may_act(self._lane_of(tp))}

    async def _release(self, tps: list[TP]) -> None:
        """Hand back the leases of these lane partitions, once their last commit is in."""
        for p in sorted({p for t, p in tps if t == self._lane_topic}):
            lease = self._leases.pop(p, None)
            if lease is not None:
                try:
                    await self._ownership.release(lease)
                except HubstreamError as exc:  # the next owner then waits one lease
                    log.info("%s: release of partition %d not written: %s", self.member_id, p, exc)

    def _lane(self, partition: int) -> str:
        return f"{self.settings.name}/p{partition}"

    def _check_lane(self, partition: int) -> None:
        if not self._may_act(partition):
            raise LaneLost(f"{self._lane(partition)}: this copy's lease no longer holds")

    def _may_act(self, partition: int) -> bool:
        """Does this copy's lease of `partition` cover an act now? Once it does not, the partition
        is dropped as if revoked: what was read of it is redone by its next owner."""
        lease = self._leases.get(partition)
        if lease is not None and lease.may_act(time.monotonic()):
            return True
        if partition in self._owned:
            self._owned.discard(partition)
            log.warning(
                "%s: lease of partition %d lost; its records are left to the next owner",
                self.member_id,
                partition,
            )
        return False
