"""Batch tracking: the batch table, the ack agent, the reaper timer and the Carlyle HTTP API."""

from __future__ import annotations

from typing import Any, cast

from agents.context import WorkerContext
from app.batch.ack_handler import AckRecord, apply_ack_record
from app.batch.ack_position import AckTable
from app.batch.service import BatchService
from app.batch.views import BatchApi, register_views
from app.crashpoints import InjectedFault, crash_point
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.in_order import STALLED_AFTER_S
from app.worker.timers import every
from tables.batches import FaustBatchTable, batch_table, changelog_topic

__all__ = ["register"]


def register(worker: WorkerContext) -> None:
    app, settings = worker.app, worker.settings
    partitions = settings.table_partitions
    table = batch_table(app, settings)
    service = worker.batch_service = BatchService(app, FaustBatchTable(table), settings)
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    # Created here with the table's partition count before anything produces to them: a topic the
    # broker auto-created with its default count may have fewer, and acks for the batches of the
    # missing partitions could not be sent (the ack topic is co-partitioned with the table).
    KafkaAdmin(settings.bootstrap, settings.kafka_replication_factor).ensure(
        [
            TopicSpec(settings.batch_acks_topic, partitions),
            TopicSpec(f"{settings.batch_acks_topic}-dlq", 1),
            TopicSpec(settings.batch_completions_topic, partitions),
        ]
    )
    acks_topic = app.topic(settings.batch_acks_topic, partitions=partitions, **raw)
    dlq_topic = app.topic(f"{settings.batch_acks_topic}-dlq", partitions=1, **raw)
    service.completions_topic = app.topic(settings.batch_completions_topic, partitions=partitions, **raw)

    acks_name = settings.batch_acks_topic

    positions = worker.in_order_positions(acks_name, settings.app_id, AckTable(service))

    @app.agent(acks_topic, name="batch-acks")
    async def apply_acks(stream: Any) -> None:
        # Up to 100 records at a time, then one wait for their changelog writes. Each partition's
        # records are handled in offset order from the position the table keeps
        # (app.kafka.in_order, app.batch.ack_position): Faust's own committed offset can pass a
        # record never handled.
        async for events in stream.take_events(100, within=0.05):
            for event in events:
                msg = event.message
                try:
                    crash_point("batch.acks.delivered")
                except InjectedFault:
                    continue  # armed in tests: the record is lost on its way in, as Faust can lose one
                if not await positions.admit(msg.partition, msg.offset):
                    continue
                record = AckRecord(msg.partition, msg.offset, msg.key, msg.value, msg.headers)
                await apply_ack_record(service, acks_topic, dlq_topic, record)
                positions.handled(msg.partition, msg.offset)
            positions.save()
            await service.flush()

    @every(app, STALLED_AFTER_S / 2, "batch-acks-watchdog")
    async def watch_acks() -> None:
        await positions.watch()

    async def on_recovered() -> None:
        topic = changelog_topic(table)
        service.mark_ready(tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic)

    table.on_recover(on_recovered)

    async def on_revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        service.mark_unready()

    app.on_partitions_revoked.connect(cast(Any, on_revoked))

    @every(app, settings.batch_reap_interval_s, "batch-reaper")
    async def reap() -> None:
        service.reap()

    register_views(app, BatchApi(service))
