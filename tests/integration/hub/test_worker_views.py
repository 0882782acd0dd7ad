"""The worker mounts the actor API and exposes the hub the subscription saves into."""

from __future__ import annotations

from pathlib import Path

from app.settings import Settings
from app.worker.factory import CAPABILITIES, create_app


def test_agents_hub_registers_the_actor_api(stack: Settings, tmp_path: Path) -> None:
    assert "agents.hub" in CAPABILITIES
    app = create_app(stack.model_copy(update={"home": tmp_path}), ["agents.hub"])
    routes = {
        (r.method, r.resource.canonical) for r in app.web.web_app.router.routes() if r.resource is not None
    }
    assert {("GET", "/api/peek"), ("GET", "/api/peek/{domain}"), ("DELETE", "/api/dequeue")} <= routes
    assert callable(app.message_hub.get)  # type: ignore[attr-defined]
