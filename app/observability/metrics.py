"""Prometheus metrics of this process: prometheus_client objects in one project registry.

Capability code declares its families at import time through the helpers below (they register in
`REGISTRY`, the registry `/metrics` renders) and then uses prometheus_client's own API:

    from app.observability import metrics

    DLQ = metrics.counter("hubstream_dlq_messages", "Messages sent to a DLQ", ("subscription",))
    DLQ.labels(subscription="orders").inc()        # exposed as hubstream_dlq_messages_total
    metrics.gauge("hubstream_rq_depth", "Records in RQ", ("subscription",)).labels("o").set(12)
    with metrics.histogram("hubstream_save_seconds", "Hub save time").time():
        ...

Declaring a name twice raises ValueError. Samples computed at scrape time come from prometheus_client
collectors (an object whose `collect()` yields metric families): register a long-lived one with
`REGISTRY.register(...)`, or pass one made for a single scrape to `render` (the dashboard's, scrape.py).

The exposition is the text format 0.0.4: counters are exposed as `<name>_total` without `_created`
series, and metric and label names must be classic Prometheus names (no UTF-8 names, which the 0.0.4
format would show mangled).
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import prometheus_client
from aiohttp import web
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.validation import enable_legacy_validation

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS_S",
    "REGISTRY",
    "cosmos_request_hook",
    "cosmos_response_hook",
    "counter",
    "gauge",
    "histogram",
    "http_middleware",
    "render",
    "serve",
]

# Process-wide switches of prometheus_client (they have no type annotations):
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
enable_legacy_validation()  # type: ignore[no-untyped-call]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what `generate_latest` writes (CONTENT_TYPE_LATEST says 1.0.0)
DEFAULT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REGISTRY = CollectorRegistry()  # the project's, not prometheus_client's global one (no python_* series)
prometheus_client.ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, memory, fds, start time


def counter(
    name: str, help_text: str, labelnames: Sequence[str] = (), *, registry: CollectorRegistry = REGISTRY
) -> Counter:
    """A counter family, exposed as `<name>_total` (a `_total` suffix on `name` is dropped first)."""
    return Counter(name, help_text, labelnames, registry=registry)


def gauge(
    name: str, help_text: str, labelnames: Sequence[str] = (), *, registry: CollectorRegistry = REGISTRY
) -> Gauge:
    return Gauge(name, help_text, labelnames, registry=registry)


def histogram(
    name: str,
    help_text: str,
    labelnames: Sequence[str] = (),
    buckets: Sequence[float] = DEFAULT_BUCKETS_S,
    *,
    registry: CollectorRegistry = REGISTRY,
) -> Histogram:
    """A histogram family (seconds by default); the `+Inf` bucket is added."""
    return Histogram(name, help_text, labelnames, buckets=buckets, registry=registry)


class _Scrape:
    """The collectors of one scrape, in order (prometheus_client renders any `collect()`)."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


def render(*scraped: Collector, registry: CollectorRegistry = REGISTRY) -> bytes:
    """The /metrics body: the registry's families, then those of `scraped` (made for this scrape)."""
    return prometheus_client.generate_latest(_Scrape([registry, *scraped]))


# -- Cosmos requests (azure-core CustomHookPolicy hooks: pass both to the CosmosClient) ----------

COSMOS_REQUESTS = counter(
    "hubstream_cosmos_requests", "Cosmos DB HTTP requests by method and status", ("method", "status")
)
COSMOS_LATENCY = histogram(
    "hubstream_cosmos_request_seconds", "Cosmos DB HTTP request latency (one try)", ("method",)
)
_STARTED = "hubstream_started_s"


def cosmos_request_hook(request: Any) -> None:
    """azure-core `raw_request_hook`: remember when this try started."""
    request.context[_STARTED] = time.perf_counter()


@functools.lru_cache(maxsize=1024)
def _cosmos_series(method: str, status: str) -> tuple[Any, Any]:
    """The labelled children, looked up once per (method, status): `labels()` on every request
    was ~5 % of the client's CPU per Cosmos request."""
    return COSMOS_REQUESTS.labels(method=method, status=status), COSMOS_LATENCY.labels(method=method)


def cosmos_response_hook(response: Any) -> None:
    """azure-core `raw_response_hook`: count the request and observe its latency."""
    method = str(getattr(response.http_request, "method", "?"))
    status = str(getattr(response.http_response, "status_code", "?"))
    requests, latency = _cosmos_series(method, status)
    requests.inc()
    started = response.context.get(_STARTED)
    if isinstance(started, float):
        latency.observe(time.perf_counter() - started)


# -- HTTP requests served by the worker (an aiohttp middleware) -----------------------------------

HTTP_REQUESTS = counter(
    "hubstream_http_requests", "HTTP requests served, by route template", ("method", "route", "status")
)
HTTP_LATENCY = histogram("hubstream_http_request_seconds", "HTTP request handling time", ("method", "route"))

# -- which build answers: one series of value 1, its labels the versions --------------------------


def _version() -> str:
    try:
        return importlib.metadata.version("hubstream")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


gauge("hubstream_build_info", "hubstream's version and Python's (value 1)", ("version", "python")).labels(
    version=_version(), python=platform.python_version()
).set(1)


@functools.lru_cache(maxsize=1024)
def _http_series(method: str, route: str, status: int) -> tuple[Any, Any]:
    """Labelled children per (method, route template, status): bounded, looked up once each."""
    return (
        HTTP_REQUESTS.labels(method=method, route=route, status=str(status)),
        HTTP_LATENCY.labels(method=method, route=route),
    )


def http_middleware() -> Any:
    """Counts requests and handling time per route template (bounded label values)."""

    @web.middleware
    async def count_requests(request: Any, handler: Any) -> Any:
        route = "unmatched"
        resource = getattr(request.match_info.route, "resource", None)
        if resource is not None:
            route = resource.canonical
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            requests, latency = _http_series(request.method, route, status)
            requests.inc()
            latency.observe(time.perf_counter() - started)

    return count_requests


# -- a /metrics endpoint of its own, for processes without a web server (library consumers) -------


def serve(port: int, host: str, *scraped: Collector) -> Callable[[], None]:
    """Serve the registry's families and those of `scraped` (read at each scrape) on
    http://host:port/metrics from a thread of prometheus_client's; returns the call that stops it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scrape([REGISTRY, *scraped]))
    server, thread = prometheus_client.start_http_server(port, addr=host, registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
