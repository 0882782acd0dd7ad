"""The dashboard's JSON aggregate and its page.

GET /api/dashboard        every section; global ones read from Kafka/Cosmos (cached a little), local
                          ones (subscription shards, batches) gathered from this worker and its peers
GET /api/dashboard/local  this worker's local sections only (what peers ask each other)
GET /dashboard/           the page (app/dashboard/static/dashboard.html), which polls /api/dashboard
                          and charts the last minutes of what it polled

A section that fails is reported in "errors" with its reason; the others are still served.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from yarl import URL

from app.batch.service import BatchService
from app.composite.store import MetadataStore
from app.dashboard import sources
from app.dashboard.api_models import Dashboard, LocalSections
from app.hub.web import HubHolder
from app.settings import Settings
from app.subscription.registry import SubscriptionRegistry
from app.subscription.supervisor import Supervisor
from app.web.responses import model_response

__all__ = ["PAGE_PATH", "DashboardConfig", "DashboardService", "LocalServices"]


class LocalServices(Protocol):
    """What the dashboard reads of this worker's own capabilities (agents' WorkerContext)."""

    @property
    def message_hub(self) -> HubHolder | None: ...

    @property
    def subscriptions(self) -> Supervisor | None: ...

    @property
    def batch_service(self) -> BatchService | None: ...


log = logging.getLogger(__name__)
PAGE_PATH = Path(__file__).with_name("static") / "dashboard.html"
PEER_HEADER = "X-Hubstream-Dashboard-Peer"
FIRST_HUB_WAIT_S = 5.0


@dataclass(frozen=True)
class DashboardConfig:
    kafka_ttl_s: float = 2.0  # composite topics, subscriptions
    pipelines_ttl_s: float = 5.0
    hub_ttl_s: float = 10.0  # hub depth reads Cosmos: refreshed in the background, never awaited
    # A section is re-read no sooner than this many times its last read took, so a slow read (hub
    # depth on a big hub) keeps its share of the stores' capacity to about 1/duty_factor.
    duty_factor: float = 5.0
    hub_max_actors: int = 200
    peer_timeout_s: float = 2.0


@dataclass
class _Cached:
    value: Any = None
    error: str | None = None
    at_s: float = 0.0
    took_s: float = 0.0
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class DashboardService:
    def __init__(
        self,
        app: Any,
        settings: Settings,
        local: LocalServices | None = None,
        config: DashboardConfig | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.local = local  # this worker's hub, shards and batch table (None: none of them here)
        self.config = config or DashboardConfig()
        self.metadata = MetadataStore.of(settings)
        self._registry: Any = None
        self._cache: dict[str, _Cached] = {}

    # -- sections --------------------------------------------------------------------------------

    def _subscription_registry(self) -> Any:
        if self._registry is None:
            self._registry = SubscriptionRegistry.of(self.settings)
        return self._registry

    def _fetchers(self) -> dict[str, tuple[float, Callable[[], Awaitable[Any]]]]:
        cfg = self.config
        return {
            "composite_topics": (
                cfg.kafka_ttl_s,
                lambda: asyncio.to_thread(sources.composite_section, self.metadata),
            ),
            "subscriptions": (
                cfg.kafka_ttl_s,
                lambda: asyncio.to_thread(
                    sources.subscriptions_section, self._subscription_registry(), self.metadata, self.settings
                ),
            ),
            "pipelines": (
                cfg.pipelines_ttl_s,
                lambda: asyncio.to_thread(sources.pipelines_section, self.settings),
            ),
            "hub": (cfg.hub_ttl_s, self._hub),
        }

    async def _hub(self) -> Any:
        holder = self.local.message_hub if self.local is not None else None
        if holder is None:
            return None  # the hub capability is not loaded in this worker
        return await sources.hub_section(await holder.get(), self.config.hub_max_actors)

    async def _refresh(self, name: str, fetch: Callable[[], Awaitable[Any]]) -> None:
        entry = self._cache[name]
        started = time.perf_counter()
        try:
            entry.value, entry.error = await fetch(), None
        except Exception as exc:
            log.warning("dashboard section %s failed: %s: %s", name, type(exc).__name__, exc)
            entry.error = f"{type(exc).__name__}: {exc}"
        entry.at_s = time.time()
        entry.took_s = time.perf_counter() - started

    async def global_sections(self) -> dict[str, Any]:
        """Each section from its cache; stale ones refresh first. The slow hub section refreshes in
        the background and is awaited (up to FIRST_HUB_WAIT_S) only before its first value."""
        waits: list[asyncio.Task[None]] = []
        hub_waits: list[asyncio.Task[None]] = []
        now = time.time()
        for name, (ttl_s, fetch) in self._fetchers().items():
            entry = self._cache.setdefault(name, _Cached())
            idle = entry.task is None or entry.task.done()
            if idle and now - entry.at_s >= max(ttl_s, entry.took_s * self.config.duty_factor):
                entry.task = asyncio.create_task(self._refresh(name, fetch), name=f"dashboard-{name}")
            if entry.task is not None and not entry.task.done():
                if name != "hub":
                    waits.append(entry.task)
                elif entry.at_s == 0:
                    hub_waits.append(entry.task)
        if waits:
            await asyncio.wait(waits)
        if hub_waits:
            await asyncio.wait(hub_waits, timeout=FIRST_HUB_WAIT_S)
        out: dict[str, Any] = {"errors": []}
        for name in self._fetchers():
            entry = self._cache[name]
            out[name] = entry.value
            out.setdefault("as_of_ms", {})[name] = int(entry.at_s * 1000)
            if entry.error:
                out["errors"].append({"section": name, "reason": entry.error})
        return out

    def local_sections(self) -> dict[str, Any]:
        """This worker's subscription shards and batches."""
        out: dict[str, Any] = {"worker": self.url(), "shards": [], "batches": [], "errors": []}
        supervisor = self.local.subscriptions if self.local is not None else None
        if supervisor is not None:
            out["shards"] = [{**s, "worker": self.url()} for s in supervisor.status()]
        service = self.local.batch_service if self.local is not None else None
        if service is not None:
            try:
                out["batches"] = [{**b, "worker": self.url()} for b in sources.batches_local(service)]
            except Exception as exc:  # a partition revoked mid-scan: report, next poll is fine
                out["errors"].append({"section": "batches", "reason": f"{type(exc).__name__}: {exc}"})
        return out

    # -- peers -----------------------------------------------------------------------------------

    def url(self) -> str:
        return str(self.app.conf.canonical_url)

    def peers(self) -> list[str]:
        """Other workers of this app, from Faust's assignor (members with table assignments)."""
        try:
            hosts = set(self.app.assignor.tables_metadata()) | set(
                self.app.assignor.external_topics_metadata()
            )
        except Exception:
            return []
        me = URL(self.url())
        return sorted(str(h) for h in hosts if (URL(str(h)).host, URL(str(h)).port) != (me.host, me.port))

    async def _peer_local(self, peer: str) -> dict[str, Any]:
        url = URL(peer).with_path("/api/dashboard/local")
        headers = {PEER_HEADER: "1"}
        if self.settings.admin_token is not None:  # the workers of one app share their tokens
            headers["Authorization"] = f"Bearer {self.settings.admin_token.get_secret_value()}"
        try:
            async with self.app.http_client.get(
                url, headers=headers, timeout=self.config.peer_timeout_s
            ) as response:
                data = orjson.loads(await response.read())
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}")
                return LocalSections.model_validate(data).model_dump()  # back to snake_case names
        except Exception as exc:
            return {
                "worker": peer,
                "shards": [],
                "batches": [],
                "errors": [{"section": "peer", "reason": f"{peer}: {type(exc).__name__}: {exc}"}],
            }

    async def aggregate(self) -> dict[str, Any]:
        started = time.perf_counter()
        local = self.local_sections()
        global_task = asyncio.create_task(self.global_sections())
        peers = await asyncio.gather(*(self._peer_local(p) for p in self.peers()))
        data = await global_task
        workers = [local, *peers]
        data["errors"].extend(e for w in workers for e in w["errors"])
        data["workers"] = [w["worker"] for w in workers]
        data["batches"] = sources.select_batches(
            (b for w in workers for b in w["batches"]), max_complete=20, max_total=200
        )
        merge_shards(data.get("subscriptions") or [], [s for w in workers for s in w["shards"]])
        data["worker"] = self.url()
        data["generated_at_ms"] = int(time.time() * 1000)
        data["took_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return data

    # -- views -----------------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=PAGE_PATH.read_bytes(),
            content_type="text/html",
            charset="utf-8",
            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    async def api(self, request: web.Request) -> web.StreamResponse:
        return model_response(Dashboard.model_validate(await self.aggregate()))

    async def api_local(self, request: web.Request) -> web.StreamResponse:
        return model_response(LocalSections.model_validate(self.local_sections()))

    def close(self) -> None:
        self.metadata.close()
        if self._registry is not None:
            self._registry.close()


def merge_shards(subscriptions: list[dict[str, Any]], runners: list[dict[str, Any]]) -> None:
    """Attach each running shard's worker, counters and blocked groups to the subscription's lag rows."""
    by_key = {(r["subscription"], r["shard"]): r for r in runners}
    for sub in subscriptions:
        blocked: list[str] = []
        for shard in sub.get("shards", []):
            runner = by_key.get((sub["name"], shard["shard"]))
            shard["worker"] = runner["worker"] if runner else None
            shard["running"] = bool(runner and runner["running"])
            for counter in ("delivered", "dead_lettered", "failures", "sidelined"):
                shard[counter] = runner[counter] if runner else None
            shard["blocked_groups"] = list(runner["blocked_groups"]) if runner else []
            blocked.extend(shard["blocked_groups"])
        sub["blocked_groups"] = sorted(blocked)
