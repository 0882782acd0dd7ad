"""What a worker's capabilities share: the Faust app, the settings, and the services one
capability registers for the others and for the process that runs the worker (instead of
attributes set on the Faust app)."""

from __future__ import annotations

from dataclasses import dataclass

import faust
from faust.types import TP

from app.batch.service import BatchService
from app.dashboard.dashboard import DashboardService
from app.errors import ConfigError
from app.hub.web import HubHolder
from app.kafka.admin import resume_offsets
from app.kafka.broker import broker_for
from app.kafka.faust_compat import seek_on_consumer_thread
from app.kafka.in_order import InOrderPositions, PositionStore
from app.pipeline.service import PipelineHost
from app.settings import Settings
from app.subscription.supervisor import Supervisor

__all__ = ["WorkerContext"]


@dataclass
class WorkerContext:
    app: faust.App
    settings: Settings
    message_hub: HubHolder | None = None  # agents.hub
    batch_service: BatchService | None = None  # agents.batches
    subscriptions: Supervisor | None = None  # agents.subscriptions
    dashboard: DashboardService | None = None  # agents.web
    pipeline_host: PipelineHost | None = None  # agents.pipelines (with PIPELINE_FILE set)

    def hub(self) -> HubHolder:
        """The message hub, for a capability that saves into it; registered by `hub` before it."""
        if self.message_hub is None:
            raise ConfigError("the flow capability needs the hub capability registered before it")
        return self.message_hub

    def in_order_positions(self, topic: str, group: str, store: PositionStore) -> InOrderPositions:
        """An agent's in-order positions over `topic` (app.kafka.in_order): seeks on the app's
        consumer thread, resumes where `group` would, and asks the broker port for end offsets."""
        app, broker = self.app, broker_for(self.settings)

        async def seek(partition: int, offset: int) -> bool:
            return await seek_on_consumer_thread(app.consumer, TP(topic, partition), offset)

        return InOrderPositions(
            topic,
            store,
            seek,
            lambda ps: resume_offsets(broker, group, [(topic, p) for p in ps]),
            lambda ps: broker.end_offsets([(topic, p) for p in ps]),
        )
