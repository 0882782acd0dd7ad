"""Batch tracking: the batch table, the ack agent, the reaper timer and the Carlyle HTTP API."""

from __future__ import annotations

from typing import Any, cast

import faust

from app.batch.ack_handler import AckRecord, apply_ack_record
from app.batch.service import BatchService
from app.batch.views import BatchApi, register_views
from app.settings import Settings
from tables.batches import batch_table, changelog_topic

__all__ = ["register"]


def register(app: faust.App, settings: Settings) -> None:
    partitions = settings.table_partitions
    table = batch_table(app, settings)
    service = BatchService(app, table, settings)
    app.batch_service = service  # type: ignore[attr-defined]
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    acks_topic = app.topic(settings.batch_acks_topic, partitions=partitions, **raw)
    dlq_topic = app.topic(f"{settings.batch_acks_topic}-dlq", partitions=1, **raw)
    service.completions_topic = app.topic(settings.batch_completions_topic, partitions=partitions, **raw)

    @app.agent(acks_topic, name="batch-acks")
    async def apply_acks(stream: Any) -> None:
        # Up to 100 records at a time, then one wait for their changelog writes: Faust may commit
        # the records' offsets only after the changes they caused are in the changelog.
        async for events in stream.take_events(100, within=0.05):
            for event in events:
                msg = event.message
                record = AckRecord(msg.partition, msg.offset, msg.key, msg.value, msg.headers)
                await apply_ack_record(service, acks_topic, dlq_topic, record)
            await service.flush()

    async def on_recovered() -> None:
        topic = changelog_topic(table)
        service.mark_ready(tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic)

    table.on_recover(on_recovered)

    async def on_revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        service.mark_unready()

    app.on_partitions_revoked.connect(cast(Any, on_revoked))

    @app.timer(settings.batch_reap_interval_s, name="batch-reaper")
    async def reap() -> None:
        service.reap()

    register_views(app, BatchApi(service))
