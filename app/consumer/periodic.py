"""The periodic part of a running copy (`KeyedConsumer`, app.consumer.kafka): each commit interval,
the offsets to commit (the poll thread commits them) and the states of settled keys forgotten."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from app.consumer.model import ConsumerSettings
from app.consumer.parts import TP, Commit, Item, Lane
from app.consumer.queues import KafkaStateLog
from app.consumer.source import Source
from app.consumer.stats import ConsumerStats
from app.errors import HubstreamError
from app.ordered.progress import KeyLanes, OffsetTracker
from app.ordered.rules import forgettable, settled

__all__ = ["PeriodicWork"]

log = logging.getLogger(__name__)


class PeriodicWork:
    """The periodic part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    _source: Source
    member_id: str
    stats: ConsumerStats
    read_idx: int
    _owned: set[int]
    _trackers: dict[TP, OffsetTracker]
    _committed: dict[TP, Commit]
    _lanes: KeyLanes[Lane, Item]
    _states: KafkaStateLog

    if TYPE_CHECKING:  # other parts' methods (stubs left at run time would hide them)

        def _may_act(self, partition: int) -> bool: ...
        def _lane_of(self, tp: TP) -> int: ...

    # -- event loop: periodic --------------------------------------------------------------------
    async def _forget_loop(self) -> None:
        """A key that failed once does not keep its state for ever: after each commit interval,
        the states `forgettable` says decide nothing any more are dropped."""
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            try:
                await self._forget_settled()
            except HubstreamError as exc:  # the tombstone was not written; tried again next time
                log.info("%s: a settled key state not forgotten: %s", self.member_id, exc)

    async def _forget_settled(self) -> None:
        """Drop the settled states of idle keys, judged against the offsets the broker took (a
        crash re-reads MQ and RQ from there, nothing below)."""
        busy = self._lanes.busy_keys
        for p in list(self._owned):
            retry = self._committed.get((self.settings.retry_topic, p))
            rq_from = (0, retry[0]) if retry is not None else None
            for key in self._states.to_check(p):
                state = self._states.get(p, key)  # now: an earlier drop awaited its tombstone
                if p not in self._owned or (p, key) in busy or not self._may_act(p):
                    continue
                if state is None or not settled(state):
                    self._states.checked(p, key)  # until its next write
                    continue
                idx = state.handled[0] if state.handled is not None else self.read_idx
                at = p if self._source.k_of(idx) == 1 else self._source.partition_of_key(idx, key)
                main = self._committed.get((self.settings.source_topic(idx), at))
                if main is None:
                    continue
                if forgettable(state, (idx, main[0]), rq_from):
                    await self._states.drop(p, key)
                    self.stats.forgotten += 1

    async def _to_commit(self) -> dict[TP, Commit]:
        out = {}
        for tp, tracker in self._trackers.items():
            lane = self._lane_of(tp)
            owned = lane in self._owned and self._may_act(lane)
            commit = _commit_of(tracker, self._committed.get(tp)) if owned else None
            if commit is not None:
                out[tp] = commit
        return out


def _commit_of(tracker: OffsetTracker, last: Commit | None) -> Commit | None:
    """What to commit now: the committable offset with the finished offsets above it, when the
    offset moved or more finished above it (a slow head holds the offset while others finish)."""
    commit = (tracker.committable, tracker.progress())
    if last is not None and (commit[0] < last[0] or commit == last):
        return None
    return commit
