"""The message hub capability: the actor API views and the hub the subscription saves into.

`worker.message_hub` is a HubHolder; a subscription agent saves with
`hub = await holder.get(); await hub.save(events)`.
"""

from __future__ import annotations

import logging

import mode

from agents.context import WorkerContext
from app.hub.web import HubApi, HubHolder, register_views
from app.worker.timers import every

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(worker: WorkerContext) -> None:
    app, settings = worker.app, worker.settings
    holder = worker.message_hub = HubHolder(settings)
    register_views(app, HubApi(holder.get, settings))

    @app.service
    class MessageHubCloser(mode.Service):
        async def on_stop(self) -> None:
            await holder.close()

    if settings.hub_reclaim_interval_s > 0:

        @every(app, settings.hub_reclaim_interval_s, "hub-reclaim", on_leader=True)
        async def reclaim() -> None:
            """Delete what actors acknowledged (drained drawers); one worker sweeps at a time."""
            report = await (await holder.get()).reclaim()
            if report.drawers:
                log.info("hub: reclaimed %d drained drawers (%d documents)", report.drawers, report.documents)
