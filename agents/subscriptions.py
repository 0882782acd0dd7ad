"""Subscriptions: the slot topic that hands shards to workers, the GroupState table, the
supervisor that runs this worker's shard runners, and the read-only web views.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any, cast

from agents.context import WorkerContext
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.subscription.supervisor import Supervisor
from app.subscription.views import register_views
from app.worker.timers import every
from tables.subscriptions import GroupStateTable

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(worker: WorkerContext) -> None:
    app, settings = worker.app, worker.settings
    slots_name = f"{settings.app_id}-subscription-slots"
    # Faust declares only its internal topics; without this the broker would auto-create the
    # slot topic with its default partition count.
    KafkaAdmin(settings.bootstrap, settings.kafka_replication_factor).create(
        [TopicSpec(slots_name, settings.subscription_shard_slots)]
    )
    slots_topic = app.topic(
        slots_name,
        partitions=settings.subscription_shard_slots,
        key_type=bytes,
        value_type=bytes,
    )
    table = GroupStateTable(app, settings)

    def slots_in(tps: Any) -> set[int]:
        return {tp.partition for tp in tps or () if tp.topic == slots_topic.get_topic_name()}

    def owned_slots() -> set[int] | None:
        if app.rebalancing or not cast(Any, app.tables).recovery.completed.is_set():
            return None
        return slots_in(app.assignor.assigned_actives())

    owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    supervisor = worker.subscriptions = Supervisor(settings, table, owned_slots, owner=owner)

    @app.agent(slots_topic, name="subscription-slots")
    async def hold_slots(stream: Any) -> None:
        async for _ in stream:  # the slot topic carries no work; owning a partition means owning shards
            pass

    @every(app, 1.0, "subscription-reconcile")
    async def reconcile() -> None:
        await supervisor.reconcile()

    # Faust revokes every partition at each rebalance (the eager protocol): shards stop only
    # once the new assignment shows their slot went elsewhere.
    async def on_assigned(sender: Any, assigned: Any = None, **kwargs: Any) -> None:
        await supervisor.keep_slots(slots_in(assigned))

    app.on_partitions_assigned.connect(cast(Any, on_assigned))

    async def on_shutdown(sender: Any, **kwargs: Any) -> None:
        await supervisor.stop_all()

    app.on_before_shutdown.connect(cast(Any, on_shutdown))

    register_views(app, supervisor)
