"""The message hub capability: the actor API views and the hub the subscription saves into.

`worker.message_hub` is a HubHolder; a subscription agent saves with
`hub = await holder.get(); await hub.save(events)`.
"""

from __future__ import annotations

import mode

from agents.context import WorkerContext
from app.hub.web import HubApi, HubHolder, register_views

__all__ = ["register"]


def register(worker: WorkerContext) -> None:
    app, settings = worker.app, worker.settings
    holder = worker.message_hub = HubHolder(settings)
    register_views(app, HubApi(holder.get, settings))

    @app.service
    class MessageHubCloser(mode.Service):
        async def on_stop(self) -> None:
            await holder.close()
