"""The worker mounts the actor API and exposes the hub the subscription saves into."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from faust.web.drivers.aiohttp import Web as AiohttpWeb

from agents import WORKER, build_worker
from app.settings import Settings


def test_agents_hub_registers_the_actor_api(stack: Settings, tmp_path: Path) -> None:
    assert "hub" in WORKER
    worker = build_worker(stack.model_copy(update={"home": tmp_path}), ["hub"])
    app = worker.app
    routes = {
        (r.method, r.resource.canonical)
        for r in cast(AiohttpWeb, app.web).web_app.router.routes()
        if r.resource is not None
    }
    assert {("GET", "/api/peek"), ("GET", "/api/peek/{domain}"), ("DELETE", "/api/dequeue")} <= routes
    assert worker.message_hub is not None and callable(worker.message_hub.get)
