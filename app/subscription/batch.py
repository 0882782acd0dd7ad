"""Delivery to a batch sink: up to SUBSCRIPTION_BATCH_MAX deliverable messages of a shard per call.

A round decides every item in read order with the GroupState rules. A group's first deliverable
message joins the batch; its later ones join too while they would be deliverable once the earlier
ones are delivered (decided on that speculative state). Items that must be sidelined or
dead-lettered go to RQ/DLQ before the call, as on the per-message path.

After the call, outcomes are applied per group in order: None = delivered; the group's first
exception is a failure (its `retriable` and the retry policy decide RQ vs DLQ); the group's later
messages of that batch - `NotAttempted` per the sink contract, whatever they returned - are decided
again in the next round against the state that now holds the failure (so they are sidelined
behind it, follow it to DLQ, or, with skip_failed, are delivered in the next call). Rounds repeat
until every item is handled; the caller commits offsets only after that.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from app.ordered.rules import Action, GroupState, on_delivered
from app.ordered.work import Work
from app.subscription.delivery import Delivery, run_together
from app.subscription.endpoints import BatchSink
from app.subscription.errors import EndpointUnavailable

__all__ = ["BatchDelivery"]

log = logging.getLogger(__name__)


class BatchDelivery:
    def __init__(self, delivery: Delivery, sink: BatchSink, batch_max: int, timeout_s: float) -> None:
        self.delivery = delivery
        self.sink = sink
        self.batch_max = batch_max
        self.timeout_s = timeout_s

    async def process(self, items: list[Work]) -> None:
        pending = items
        while pending:
            pending = await self._round(pending)

    async def _round(self, items: list[Work]) -> list[Work]:
        d = self.delivery
        engine = d.engine
        by_group: dict[str, list[Work]] = defaultdict(list)
        for item in items:
            by_group[item.ordering_key].append(item)
        batch: dict[str, list[Work]] = {}
        deferred: dict[str, list[Work]] = {}
        slow: list[str] = []
        room = self.batch_max
        for group, group_items in by_group.items():
            # Fast path: a group without state whose items are all decodable MQ records is deliverable.
            if d.states.get(group) is None and all(i.meta is None and not i.undecodable for i in group_items):
                take = group_items[:room]
                if take:
                    batch[group] = take
                    room -= len(take)
                if len(take) < len(group_items):
                    deferred[group] = group_items[len(take) :]
            else:
                slow.append(group)

        async def plan(group: str) -> None:
            nonlocal room
            chosen: list[Work] = []
            speculative: GroupState | None = None
            for i, item in enumerate(by_group[group]):
                if item.undecodable:
                    if chosen:  # keep read order: handle it after the batch
                        deferred[group] = by_group[group][i:]
                        break
                    d.stats.count(await engine.undecodable(item))
                    continue
                state = speculative if chosen else d.states.get(group)
                action = engine.decide(item, state)
                if action is Action.DELIVER and room > 0:
                    chosen.append(item)
                    room -= 1
                    speculative = on_delivered(state, item.main, item.read, engine.generation)
                elif chosen or action is Action.DELIVER:
                    deferred[group] = by_group[group][i:]  # decided after the batch's outcomes
                    break
                else:
                    d.stats.count(await engine.not_delivered(item, action))
            if chosen:
                batch[group] = chosen

        await run_together(plan(g) for g in slow)
        if not batch:
            return [i for g in deferred.values() for i in g]
        outcomes = await self._call([i for g in batch.values() for i in g])
        again: dict[str, list[Work]] = {}
        troubled: list[tuple[str, list[Work], list[BaseException | None]]] = []
        for group, group_items in batch.items():
            results = [outcomes[id(i)] for i in group_items]
            if all(r is None for r in results):
                for item in group_items:
                    d.stats.count(await engine.delivered(item))
            else:
                troubled.append((group, group_items, results))

        async def settle(group: str, group_items: list[Work], results: list[BaseException | None]) -> None:
            for n, (item, result) in enumerate(zip(group_items, results, strict=True)):
                if result is None:
                    d.stats.count(await engine.delivered(item))
                    continue
                d.stats.failures += 1
                d.stats.count(await engine.failed(item, result))
                later = group_items[n + 1 :]
                if any(r is None for r in results[n + 1 :]):
                    log.error(
                        "%s: batch sink delivered messages of group %s after its failed message %s; "
                        "they are handled again behind it (duplicates)",
                        d.sub.name,
                        group,
                        d.message(item).message_id,
                    )
                again[group] = later
                return

        await run_together(settle(*t) for t in troubled)
        nxt: list[Work] = []
        for group in by_group:
            nxt += again.get(group, []) + deferred.get(group, [])
        return nxt

    async def _call(self, items: list[Work]) -> dict[int, BaseException | None]:
        d = self.delivery
        d.check()
        d.stats.batches += 1
        messages = [d.message(i) for i in items]
        try:
            results = list(await asyncio.wait_for(self.sink(messages), self.timeout_s))
        except TimeoutError:
            target = d.sub.endpoint.target
            err = EndpointUnavailable(f"batch sink {target} timed out after {self.timeout_s} s")
            results = [err] * len(items)
        except Exception as exc:  # a failing call fails every message of the batch; the shard goes on
            results = [exc] * len(items)
        if len(results) != len(items):
            err = EndpointUnavailable(
                f"batch sink {d.sub.endpoint.target} returned {len(results)} outcomes "
                f"for {len(items)} messages"
            )
            results = [err] * len(items)
        return {id(i): r for i, r in zip(items, results, strict=True)}
