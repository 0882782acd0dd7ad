"""A starting shard adopts the RQ/DLQ copies written before a crash whose group-state write never
landed (`app.ordered.orphans`), before it reads MQ."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from app.composite.model import CompositeTopic
from app.kafka.admin import committed_offsets
from app.kafka.reading import read_from
from app.ordered.orphans import Queue, adopt
from app.ordered.rules import GroupState, MessageState
from app.subscription.chain import ShardChain
from app.subscription.orphans import copy_of
from app.subscription.shards import assignments

__all__ = ["ShardAdoption"]

log = logging.getLogger(__name__)


class ShardAdoption(ShardChain):
    """The adoption part of `ShardRunner`."""

    if TYPE_CHECKING:  # defined by ShardRunner; a stub here must not stand in for them at runtime

        def check_lease(self) -> None: ...

    async def _adopt_orphans(self) -> None:
        """Record the RQ/DLQ copies written before a crash whose state write never landed
        (`app.subscription.orphans`): RQ from the committed offsets of the RQ storage topics still
        to be read, DLQ from the start of its current storage topic (it has no reader to commit)."""
        rq, dlq = self._topic(self.rq), self._composite(self.sub.dlq_topic)
        rq_tps = [
            (a.storage_topic, p)
            for a in assignments(rq, self.shard_id, self.sub.shard_count, self.rq.idx)
            for p in a.assigned_partitions
        ]
        committed = await asyncio.to_thread(
            committed_offsets, self.settings.bootstrap, self.sub.consumer_group, rq_tps
        )
        dlq_at = assignments(dlq, self.shard_id, self.sub.shard_count, dlq.produce_pointer)[0]
        plan: list[tuple[Queue, CompositeTopic, dict[tuple[str, int], int]]] = [
            ("rq", rq, dict(zip(rq_tps, committed, strict=True))),
            ("dlq", dlq, {(dlq_at.storage_topic, p): 0 for p in dlq_at.assigned_partitions}),
        ]
        adopted = await asyncio.to_thread(self._read_orphans, plan)
        for group_id, state in adopted.items():
            self.states.put(group_id, state)
        if self.stats.adopted:
            self.check_lease()
            await self.states.flush()
            log.warning(
                "%s: recorded %d RQ/DLQ copies written before a crash that its group states lacked",
                self.label,
                self.stats.adopted,
            )

    def _read_orphans(
        self, plan: list[tuple[Queue, CompositeTopic, dict[tuple[str, int], int]]]
    ) -> dict[str, GroupState]:
        """The states to write: each group's state with the copies it lacks recorded. Read as a
        stream (a DLQ is read from its start): only the groups that lack a copy are kept."""
        adopted: dict[str, GroupState] = {}
        earlier: dict[str, list[MessageState]] = defaultdict(list)  # RQ copies read, per group
        for queue, topic, starts in plan:
            for msg in read_from(self.broker, starts):
                at = (topic.index_of(msg.topic()), msg.offset())
                copy = copy_of(
                    queue,
                    msg.key(),
                    msg.headers(),
                    at,
                    self.sub.incarnation,
                    self.settings.max_group_id_bytes,
                )
                if copy is None:
                    continue
                known = adopted.get(copy.group_id) or self.states.get(copy.group_id)
                new = adopt(known, copy, self.delivery.engine.generation, earlier[copy.group_id])
                if new is not None:
                    adopted[copy.group_id] = new
                    self.stats.adopted += 1
                if queue == "rq":
                    earlier[copy.group_id].append(copy.at)
        return adopted
