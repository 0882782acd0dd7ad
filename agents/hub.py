"""The message hub capability: the actor API views and the hub the subscription saves into.

`app.message_hub` is a HubHolder; a subscription agent saves with
`hub = await app.message_hub.get(); await hub.save(events)`.
"""

from __future__ import annotations

import faust
import mode

from app.hub.web import HubApi, HubHolder, register_views
from app.settings import Settings

__all__ = ["register"]


def register(app: faust.App, settings: Settings) -> None:
    holder = HubHolder(settings)
    app.message_hub = holder  # type: ignore[attr-defined]
    register_views(app, HubApi(holder.get, settings))

    @app.service
    class MessageHubCloser(mode.Service):
        async def on_stop(self) -> None:
            await holder.close()
