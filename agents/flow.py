"""The main flow: registers the `hub` batch sink that the `data-available` subscription delivers to."""

from __future__ import annotations

from agents.context import WorkerContext
from app.batch.acks import AckProducer
from app.flow.hub_sink import HubSink
from app.subscription.endpoints import register_batch_sink

__all__ = ["HUB_SINK", "register"]

HUB_SINK = "hub"


def register(worker: WorkerContext) -> None:
    settings, holder = worker.settings, worker.hub()
    acks = AckProducer(settings.bootstrap, settings.batch_acks_topic, settings.table_partitions)
    sink = HubSink(holder.get, acks, max_payload_bytes=settings.max_payload_bytes)
    register_batch_sink(HUB_SINK, sink)
