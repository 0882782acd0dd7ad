"""The worker's own web surface: dashboard page and JSON, /metrics, /openapi.json."""

from __future__ import annotations

from typing import Any

import faust
import mode
from aiohttp import web

from agents.context import WorkerContext
from agents.openapi import worker_openapi_document
from app.dashboard.dashboard import DashboardService
from app.observability import metrics
from app.observability.scrape import DashboardCollector
from app.web.responses import guarded, json_response

__all__ = ["register"]


def register(worker: WorkerContext) -> None:
    app = worker.app
    dashboard = worker.dashboard = DashboardService(app, worker.settings, worker)
    document = worker_openapi_document()

    async def scrape(request: web.Request) -> web.StreamResponse:
        data = {**await dashboard.global_sections(), **dashboard.local_sections()}
        body = metrics.render(DashboardCollector(data))
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def spec(request: web.Request) -> web.StreamResponse:
        return json_response(document)

    def page(path: str, name: str, handler: Any) -> None:
        async def get(self: Any, request: web.Request) -> web.StreamResponse:
            response: web.StreamResponse = await guarded(handler)(request)
            return response

        app.page(path, name=name)(type(f"WebView_{name}", (faust.web.View,), {"get": get}))

    page("/dashboard/", "dashboard_page", dashboard.page)
    page("/api/dashboard", "dashboard_api", dashboard.api)
    page("/api/dashboard/local", "dashboard_local", dashboard.api_local)
    page("/metrics", "metrics", scrape)
    page("/openapi.json", "openapi", spec)

    @app.service
    class DashboardCloser(mode.Service):
        async def on_stop(self) -> None:
            dashboard.close()
