"""The main flow: registers the `hub` batch sink that the `data-available` subscription delivers to."""

from __future__ import annotations

import faust

from app.batch.acks import AckProducer
from app.flow.hub_sink import HubSink
from app.settings import Settings
from app.subscription.endpoints import register_batch_sink

__all__ = ["HUB_SINK", "register"]

HUB_SINK = "hub"


def register(app: faust.App, settings: Settings) -> None:
    holder = app.message_hub  # type: ignore[attr-defined]  # set by agents.hub, registered before us
    acks = AckProducer(settings.bootstrap, settings.batch_acks_topic, settings.table_partitions)
    sink = HubSink(holder.get, acks, settings.table_partitions, max_payload_bytes=settings.max_payload_bytes)
    register_batch_sink(HUB_SINK, sink)
