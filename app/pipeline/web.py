"""The pipeline process's HTTP API (like Kafka Connect's REST API), on its Faust web server:
a thin adapter over PipelineOperator. Routes and their answers: app/pipeline/api_models.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from faust.web import View

from app.observability import metrics
from app.observability.scrape import PipelineCollector
from app.pipeline.api_models import (
    PipelineList,
    pipeline_openapi_document,
)
from app.pipeline.errors import PipelineNotRunning, UnknownPipeline
from app.pipeline.operator import PipelineOperator, log_range
from app.settings import Settings
from app.web.responses import guarded, json_response, model_response, read_json, require_admin

__all__ = ["PipelineViews", "register_views"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PIPELINE = "/pipelines/{name}"
WRITER = "/pipelines/{name}/writers/{writer}"


class PipelineViews:
    def __init__(self, operators: Mapping[str, PipelineOperator], settings: Settings) -> None:
        self.operators = dict(operators)
        self.settings = settings
        self.document = pipeline_openapi_document()

    def _operator(self, request: web.Request) -> PipelineOperator:
        name = request.match_info["name"]
        if name not in self.operators:
            raise UnknownPipeline(f"this process runs no pipeline named {name[:200]!r}")
        return self.operators[name]

    @guarded
    async def openapi(self, request: web.Request) -> web.StreamResponse:
        return json_response(self.document)

    @guarded
    async def scrape(self, request: web.Request) -> web.StreamResponse:
        """Prometheus: the process's series (build, process, HTTP) and its pipelines' writers."""
        pipelines: list[dict[str, object]] = []
        for operator in self.operators.values():
            try:
                status = await operator.status()
            except PipelineNotRunning:
                # still starting or stopping: a scrape says so instead of failing the whole page
                pipelines.append({"name": operator.name, "running": False, "writers": []})
                continue
            writers = [
                {
                    "name": n,
                    "lag": w.lag,
                    "offset": w.offset,
                    "stopped": w.stopped,
                    "dead_lettered": w.dead_lettered,
                }
                for n, w in status.writers.items()
            ]
            pipelines.append(
                {
                    "name": status.pipeline,
                    "running": True,
                    "end_offset": status.commit_log.end_offset,
                    "writers": writers,
                }
            )
        body = metrics.render(PipelineCollector(pipelines))
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

    @guarded
    async def pipelines(self, request: web.Request) -> web.StreamResponse:
        return model_response(PipelineList(pipelines=[op.summary() for op in self.operators.values()]))

    @guarded
    async def status(self, request: web.Request) -> web.StreamResponse:
        return model_response(await self._operator(request).status())

    @guarded
    async def offsets(self, request: web.Request) -> web.StreamResponse:
        return model_response(await self._operator(request).offsets())

    @guarded
    async def log(self, request: web.Request) -> web.StreamResponse:
        require_admin(request, self.settings)  # entries carry the documents themselves
        operator = self._operator(request)
        first, last = log_range(request.query)
        return model_response(await operator.log(first, last))

    @guarded
    async def pause_all(self, request: web.Request) -> web.StreamResponse:
        return model_response(await self._operator(request).pause_all())

    @guarded
    async def resume_all(self, request: web.Request) -> web.StreamResponse:
        return model_response(await self._operator(request).resume_all())

    @guarded
    async def pause(self, request: web.Request) -> web.StreamResponse:
        return model_response(await self._operator(request).pause(request.match_info["writer"]))

    @guarded
    async def resume(self, request: web.Request) -> web.StreamResponse:
        return model_response(await self._operator(request).resume(request.match_info["writer"]))

    @guarded
    async def step(self, request: web.Request) -> web.StreamResponse:
        return model_response(await self._operator(request).step(request.match_info["writer"]))

    @guarded
    async def mark(self, request: web.Request) -> web.StreamResponse:
        operator = self._operator(request)
        body = await read_json(request)
        return model_response(await operator.mark(request.match_info["writer"], body))

    def routes(self) -> list[tuple[str, str, Handler]]:
        """(method, path, handler) of every route, static paths first."""
        return [
            ("get", "/openapi.json", self.openapi),
            ("get", "/metrics", self.scrape),
            ("get", "/pipelines", self.pipelines),
            ("get", f"{PIPELINE}/status", self.status),
            ("get", f"{PIPELINE}/offsets", self.offsets),
            ("get", f"{PIPELINE}/log", self.log),
            ("post", f"{PIPELINE}/pause", self.pause_all),
            ("post", f"{PIPELINE}/resume", self.resume_all),
            ("post", f"{WRITER}/pause", self.pause),
            ("post", f"{WRITER}/resume", self.resume),
            ("post", f"{WRITER}/step", self.step),
            ("post", f"{WRITER}/offset", self.mark),
        ]


def register_views(app: Any, operators: Mapping[str, PipelineOperator], settings: Settings) -> PipelineViews:
    """Mount the API on the Faust web server (Faust passes path parameters as keyword arguments)."""

    views = PipelineViews(operators, settings)
    for n, (method, path, handler) in enumerate(views.routes()):

        async def view_method(
            self: Any, request: web.Request, _handler: Handler = handler, **_params: str
        ) -> web.StreamResponse:
            return await _handler(request)

        app.page(path, name=f"pipeline_api_{n}")(type(f"PipelineView{n}", (View,), {method: view_method}))
    return views
