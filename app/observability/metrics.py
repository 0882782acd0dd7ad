"""Prometheus metrics in the text exposition format (version 0.0.4), without a client library.

Capability code counts through a tiny typed API; the families live in one process-wide registry
and `/metrics` renders them (plus samples computed at scrape time by registered collectors):

    from app.observability import metrics

    DLQ = metrics.counter("hubstream_dlq_messages_total", "Messages sent to a DLQ", ("subscription",))
    DLQ.inc(subscription="orders")                 # +1
    metrics.gauge("hubstream_rq_depth", "Records in RQ", ("subscription",)).set(12, subscription="o")
    with metrics.histogram("hubstream_save_seconds", "Hub save time").time():
        ...

Declaring a family twice with the same name, kind and labels returns the same family (so modules can
declare at import time); a different kind or label set raises ValueError.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = [
    "CONTENT_TYPE",
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "Sample",
    "cosmos_request_hook",
    "cosmos_response_hook",
    "counter",
    "gauge",
    "histogram",
    "http_middleware",
    "register_collector",
    "render",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
LabelValues = tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    """One line of a family computed at scrape time (for collectors)."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    value: float
    labels: Mapping[str, str] | None = None


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _labels_text(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape_label(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class _Family:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str]) -> None:
        if not _NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for {name}")
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()

    def _key(self, labels: Mapping[str, object]) -> LabelValues:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def header(self) -> list[str]:
        help_text = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        return [f"# HELP {self.name} {help_text}", f"# TYPE {self.name} {self.kind}"]

    def lines(self) -> list[str]:
        raise NotImplementedError


class _Scalar(_Family):
    def __init__(self, name: str, help_text: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, help_text, labelnames)
        self._values: dict[LabelValues, float] = {}

    def value(self, **labels: object) -> float:
        return self._values.get(self._key(labels), 0.0)

    def lines(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return [f"{self.name}{_labels_text(self.labelnames, k)} {_format_value(v)}" for k, v in items]


class Counter(_Scalar):
    """A monotonically increasing count; name it `*_total`."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: object) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter only goes up (got {amount})")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Scalar):
    """A value that goes up and down (depth, lag, in-flight)."""

    kind = "gauge"

    def set(self, value: float, **labels: object) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def inc(self, amount: float = 1.0, **labels: object) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels: object) -> None:
        self.inc(-amount, **labels)


class Histogram(_Family):
    """Observations in cumulative buckets (seconds by default) with their sum and count."""

    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, help_text, labelnames)
        if "le" in labelnames:
            raise ValueError(f"{name}: 'le' is reserved for histogram buckets")
        self.buckets = tuple(sorted(float(b) for b in buckets))
        self._series: dict[LabelValues, list[float]] = {}  # bucket counts..., sum, count

    def observe(self, value: float, **labels: object) -> None:
        key = self._key(labels)
        with self._lock:
            series = self._series.setdefault(key, [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    series[i] += 1
            series[-2] += value
            series[-1] += 1

    @contextmanager
    def time(self, **labels: object) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.observe(time.perf_counter() - started, **labels)

    def count(self, **labels: object) -> int:
        series = self._series.get(self._key(labels))
        return int(series[-1]) if series else 0

    def lines(self) -> list[str]:
        out: list[str] = []
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        for key, series in items:
            for bound, n in zip(self.buckets, series, strict=False):
                le = f'le="{_format_value(bound)}"'
                out.append(f"{self.name}_bucket{_labels_text(self.labelnames, key, le)} {_format_value(n)}")
            inf = 'le="+Inf"'
            out.append(
                f"{self.name}_bucket{_labels_text(self.labelnames, key, inf)} {_format_value(series[-1])}"
            )
            out.append(f"{self.name}_sum{_labels_text(self.labelnames, key)} {_format_value(series[-2])}")
            out.append(f"{self.name}_count{_labels_text(self.labelnames, key)} {_format_value(series[-1])}")
        return out


Collector = Callable[[], Iterable[Sample]]


class Registry:
    """Families by name plus scrape-time collectors; `render()` is the /metrics body."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._collectors: list[Collector] = []
        self._lock = threading.Lock()

    def _declare(self, family: _Family) -> Any:
        with self._lock:
            existing = self._families.get(family.name)
            if existing is None:
                self._families[family.name] = family
                return family
        if type(existing) is not type(family) or existing.labelnames != family.labelnames:
            raise ValueError(
                f"metric {family.name} already declared as {existing.kind} with labels {existing.labelnames}"
            )
        return existing

    def counter(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> Counter:
        family: Counter = self._declare(Counter(name, help_text, labelnames))
        return family

    def gauge(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> Gauge:
        family: Gauge = self._declare(Gauge(name, help_text, labelnames))
        return family

    def histogram(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS_S,
    ) -> Histogram:
        family: Histogram = self._declare(Histogram(name, help_text, labelnames, buckets))
        return family

    def register_collector(self, collector: Collector) -> None:
        with self._lock:
            if collector not in self._collectors:
                self._collectors.append(collector)

    def unregister_collector(self, collector: Collector) -> None:
        with self._lock:
            if collector in self._collectors:
                self._collectors.remove(collector)

    def render(self, extra: Iterable[Sample] = ()) -> str:
        """The exposition text: declared families, collector samples, then `extra` samples."""
        with self._lock:
            families = sorted(self._families.values(), key=lambda f: f.name)
            collectors = list(self._collectors)
        lines: list[str] = []
        for family in families:
            lines.extend(family.header())
            lines.extend(family.lines())
        samples = [s for collect in collectors for s in collect()]
        lines.extend(_render_samples([*samples, *extra]))
        return "\n".join(lines) + "\n"


def _render_samples(samples: Iterable[Sample]) -> list[str]:
    by_name: dict[str, list[Sample]] = {}
    for sample in samples:
        if not _NAME.match(sample.name):
            raise ValueError(f"invalid metric name {sample.name!r}")
        by_name.setdefault(sample.name, []).append(sample)
    lines: list[str] = []
    for name in sorted(by_name):
        group = by_name[name]
        first = group[0]
        lines.extend(_Family(name, first.help, ()).header()[:1])
        lines.append(f"# TYPE {name} {first.kind}")
        for sample in group:
            labels = dict(sample.labels or {})
            text = _labels_text(tuple(labels), tuple(labels.values()))
            lines.append(f"{name}{text} {_format_value(sample.value)}")
    return lines


REGISTRY = Registry()


def counter(name: str, help_text: str, labelnames: Sequence[str] = ()) -> Counter:
    """The process-wide counter family `name` (declared on first call)."""
    return REGISTRY.counter(name, help_text, labelnames)


def gauge(name: str, help_text: str, labelnames: Sequence[str] = ()) -> Gauge:
    """The process-wide gauge family `name` (declared on first call)."""
    return REGISTRY.gauge(name, help_text, labelnames)


def histogram(
    name: str, help_text: str, labelnames: Sequence[str] = (), buckets: Sequence[float] = DEFAULT_BUCKETS_S
) -> Histogram:
    """The process-wide histogram family `name` (declared on first call)."""
    return REGISTRY.histogram(name, help_text, labelnames, buckets)


def register_collector(collector: Collector) -> None:
    """Add a function whose samples are computed at every scrape (e.g. lag read from Kafka)."""
    REGISTRY.register_collector(collector)


def render(extra: Iterable[Sample] = ()) -> str:
    return REGISTRY.render(extra)


# -- Cosmos requests (azure-core CustomHookPolicy hooks: pass both to the CosmosClient) ----------

COSMOS_REQUESTS = counter(
    "hubstream_cosmos_requests_total", "Cosmos DB HTTP requests by method and status", ("method", "status")
)
COSMOS_LATENCY = histogram(
    "hubstream_cosmos_request_seconds", "Cosmos DB HTTP request latency (one try)", ("method",)
)
_STARTED = "hubstream_started_s"


def cosmos_request_hook(request: Any) -> None:
    """azure-core `raw_request_hook`: remember when this try started."""
    request.context[_STARTED] = time.perf_counter()


def cosmos_response_hook(response: Any) -> None:
    """azure-core `raw_response_hook`: count the request and observe its latency."""
    method = str(getattr(response.http_request, "method", "?"))
    status = str(getattr(response.http_response, "status_code", "?"))
    COSMOS_REQUESTS.inc(method=method, status=status)
    started = response.context.get(_STARTED)
    if isinstance(started, float):
        COSMOS_LATENCY.observe(time.perf_counter() - started, method=method)


# -- HTTP requests served by the worker (an aiohttp middleware) -----------------------------------

HTTP_REQUESTS = counter(
    "hubstream_http_requests_total", "HTTP requests served, by route template", ("method", "route", "status")
)
HTTP_LATENCY = histogram("hubstream_http_request_seconds", "HTTP request handling time", ("method", "route"))


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
            HTTP_REQUESTS.inc(method=request.method, route=route, status=str(status))
            HTTP_LATENCY.observe(time.perf_counter() - started, method=request.method, route=route)

    return count_requests
