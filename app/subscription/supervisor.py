"""Runs the shard runners this worker owns and stops the ones it lost.

A worker owns slot s when Faust assigned it partition s of the slot topic (and with it the
GroupState table partition s). Every running subscription's shard whose slot is owned here
gets a `ShardRunner`. A rebalance stops only the shards whose slot went elsewhere, once the new
assignment is known (`keep_slots`); the others run on through it. Their lanes' leases, not the
rebalance, keep two workers from acting for one shard (`app.ordered.lease`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from app.composite.model import CompositeTopic, StorageTopic
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.lease import LaneLost
from app.ordered.ownership import LaneOwnership
from app.settings import Settings
from app.subscription.endpoints import open_batch_sink, open_endpoint
from app.subscription.model import Status, Subscription
from app.subscription.owners import owner_log_of
from app.subscription.registry import SubscriptionRegistry
from app.subscription.runner import ShardRunner, ShardStates
from app.subscription.shards import shard_of_group, slot_of
from app.waiting import being_cancelled

__all__ = ["ShardKey", "StateTable", "Supervisor"]

log = logging.getLogger(__name__)
ShardKey = tuple[str, int]


class StateTable(Protocol):
    async def open_shard(
        self, subscription: str, epoch: int, slot: int, owns: Callable[[str], bool]
    ) -> ShardStates: ...


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        table: StateTable,
        owned_slots: Callable[[], set[int] | None],
        *,
        owner: str,
    ) -> None:
        """`owned_slots`: the slots assigned here, None while a rebalance or the table's recovery
        is under way (nothing starts or stops then). `owner`: this worker's name in the owner
        log (unique per process)."""
        self.settings = settings
        self.table = table
        self.owned_slots = owned_slots
        self.registry = SubscriptionRegistry.of(settings)
        self.metadata = MetadataStore.of(settings)
        self.runners: dict[ShardKey, tuple[ShardRunner, asyncio.Task[None], Subscription]] = {}
        self._owns: dict[ShardKey, Callable[[str], bool]] = {}
        self._lock = asyncio.Lock()
        self._owner_log = owner_log_of(settings, broker_for(settings))
        self.ownership = LaneOwnership(self._owner_log, owner, settings.subscription_lease_s)
        self._confirming: asyncio.Task[None] | None = None
        self._lost_at: dict[ShardKey, float] = {}  # shards whose lane another owner took

    def wanted(self, subs: dict[str, Subscription], slots: set[int]) -> dict[ShardKey, Subscription]:
        out: dict[ShardKey, Subscription] = {}
        for sub in subs.values():
            if sub.status is not Status.RUNNING:
                continue
            for shard in range(sub.shard_count):
                if slot_of(sub.name, shard, self.settings.subscription_shard_slots) in slots:
                    out[(sub.name, shard)] = sub
        return out

    async def reconcile(self) -> None:
        """Start wanted shards, stop unwanted ones. Called by a timer that survives a failed round
        (`app.worker.timers`): a slow broker must not take the worker down."""
        async with self._lock:
            slots = self.owned_slots()
            if slots is None:  # rebalancing: what runs keeps running, nothing new starts
                return
            subs = await asyncio.to_thread(self.registry.refresh)
            wanted = self.wanted(subs, slots)
            for key, (_runner, task, sub) in list(self.runners.items()):
                new = wanted.get(key)
                if task.done() or new is None or new.epoch != sub.epoch or new.version != sub.version:
                    await self._stop(key)
            now = time.monotonic()
            for key, sub in wanted.items():
                if now - self._lost_at.get(key, -1e9) < self.settings.subscription_lease_s:
                    continue  # taken over just now: give the rebalance a lease's time to move it
                if key not in self.runners:
                    try:
                        await self._start(sub, key[1])
                    except Exception:  # this shard retries at the next reconcile; the others go on
                        log.exception("%s/shard-%d could not start", *key)

    async def keep_slots(self, slots: set[int]) -> None:
        """A rebalance assigned these slots here: stop the shards of every other slot (their new
        owner starts them once its recovery is done), keep the rest running."""
        async with self._lock:
            for name, shard in list(self.runners):
                if slot_of(name, shard, self.settings.subscription_shard_slots) not in slots:
                    await self._stop((name, shard))

    async def stop_all(self) -> None:
        async with self._lock:
            for key in list(self.runners):
                await self._stop(key)
            if self._confirming is not None:
                self._confirming.cancel()
                await asyncio.gather(self._confirming, return_exceptions=True)
            self.ownership.close()
            await asyncio.to_thread(self._owner_log.close)

    async def _still_wanted(self, sub: Subscription) -> bool:
        """Is `sub` still running at the version this shard was started for? Asked once the
        shard's claim stands: a stop written before the claim is seen (`app.subscription.stopping`)."""
        now = (await asyncio.to_thread(self.registry.refresh)).get(sub.name)
        return now is not None and now.status is Status.RUNNING and now.version == sub.version

    async def _start(self, sub: Subscription, shard: int) -> None:
        if self._confirming is None or self._confirming.done():
            self._confirming = asyncio.create_task(self.ownership.run(), name="lease-confirm")
        mq: CompositeTopic = await asyncio.to_thread(self.metadata.get, sub.topic)
        slot = slot_of(sub.name, shard, self.settings.subscription_shard_slots)

        async def load_states(storage: StorageTopic) -> ShardStates:
            """The states of the groups this shard owns in `storage`, from every slot's changelog."""

            def owns(group_id: str) -> bool:
                return shard_of_group(group_id, storage, sub.shard_count) == shard

            return await self.table.open_shard(sub.state_scope, sub.epoch, slot, owns)

        states = await load_states(mq.current)  # the runner reloads when it reads an older topic
        _close: Callable[[], Awaitable[None]]
        if sub.endpoint.kind == "batch":
            runner = ShardRunner(
                self.settings,
                sub,
                shard,
                states,
                None,
                self.metadata,
                open_batch_sink(sub.endpoint),
                load_states=load_states,
                ownership=self.ownership,
                still_wanted=lambda: self._still_wanted(sub),
            )
            _close = _nothing
        else:
            endpoint, _close = open_endpoint(sub.endpoint)
            runner = ShardRunner(
                self.settings,
                sub,
                shard,
                states,
                endpoint,
                self.metadata,
                load_states=load_states,
                ownership=self.ownership,
                still_wanted=lambda: self._still_wanted(sub),
            )

        async def run() -> None:
            try:
                await runner.run()
            except LaneLost as exc:
                self._lost_at[(sub.name, shard)] = time.monotonic()
                log.warning("%s stopped: %s", runner.label, exc)
            except asyncio.CancelledError:
                if being_cancelled():
                    raise
                log.exception("%s cut by a cancelled wait; it restarts at the next reconcile", runner.label)
            except Exception:
                log.exception("%s failed; it restarts at the next reconcile", runner.label)
            finally:
                await _close()

        self.runners[(sub.name, shard)] = (runner, asyncio.create_task(run(), name=runner.label), sub)
        self._owns[(sub.name, shard)] = runner.owns

    async def _stop(self, key: ShardKey) -> None:
        runner, task, _sub = self.runners.pop(key)
        self._owns.pop(key, None)
        runner.stop()
        # asyncio.wait, not wait_for: awaiting a shard task that ended cancelled would raise that
        # cancellation here, in the caller (the reconcile timer)
        done, _ = await asyncio.wait({task}, timeout=30)
        if not done:
            task.cancel()
            log.error("%s did not stop within 30 s; cancelled", runner.label)

    def status(self) -> list[dict[str, Any]]:
        out = []
        for (name, shard), (runner, task, sub) in sorted(self.runners.items()):
            stats = runner.stats
            out.append(
                {
                    "subscription": name,
                    "shard": shard,
                    "epoch": sub.epoch,
                    "lease_epoch": None if runner.lease is None else runner.lease.epoch,
                    "running": not task.done(),
                    "delivered": stats.delivered,
                    "sidelined": stats.sidelined,
                    "dead_lettered": stats.dead_lettered,
                    "skipped": stats.skipped,
                    "failures": stats.failures,
                    "mq_storage_idx": stats.mq_storage_idx,
                    "rq_storage_idx": stats.rq_storage_idx,
                    "rq_buffered": stats.rq_buffered,
                    "mq_held_at": stats.mq_held_at,
                    "late_records": stats.late_records,
                    "adopted": stats.adopted,
                    "forgotten": stats.forgotten,
                    "missed_on_recovery": getattr(runner.states, "missed_on_recovery", 0),
                    "blocked_groups": _blocked(runner),
                }
            )
        return out

    def runner_for(self, name: str, group_id: str) -> ShardRunner | None:
        """The runner here whose shard owns the group (by the MQ's current storage topic)."""
        for key, (runner, _task, _sub) in self.runners.items():
            if key[0] == name and (runner.states.get(group_id) is not None or self._owns[key](group_id)):
                return runner
        return None


async def _nothing() -> None:
    return None


def _blocked(runner: ShardRunner) -> list[str]:
    states = getattr(runner.states, "states", {})
    return sorted(g for g, s in states.items() if s.dlq.pending)
