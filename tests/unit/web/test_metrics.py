"""The /metrics exposition as a Prometheus server scrapes it: names, labels, values, HELP/TYPE lines,
histogram buckets, collectors, and the families the worker's integration test reads."""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from app.observability import metrics
from app.observability.scrape import DashboardCollector

# One sample line of the text format 0.0.4 (what the integration test's reader expects too).
LINE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? \S+$', re.S
)
Key = tuple[str, tuple[tuple[str, str], ...]]


def _samples(text: str) -> dict[Key, float]:
    """(sample name, sorted labels) -> value, read by prometheus_client's parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _render(*scraped: Any, registry: CollectorRegistry) -> str:
    return metrics.render(*scraped, registry=registry).decode()


def test_counter_and_gauge_render_with_help_type_labels_and_the_total_suffix() -> None:
    registry = CollectorRegistry()
    dlq = metrics.counter(
        "hubstream_dlq_messages", "Messages sent to a DLQ", ("subscription",), registry=registry
    )
    dlq.labels(subscription="orders").inc()
    dlq.labels(subscription="orders").inc(2)
    dlq.labels(subscription="bills").inc()
    # A name given with its `_total` suffix is exposed the same way (not as `_total_total`).
    metrics.counter("hubstream_retries_total", "Retries", registry=registry).inc(4)
    depth = metrics.gauge("hubstream_rq_depth", "Records in RQ", registry=registry)
    depth.set(7)
    depth.dec(2)
    text = _render(registry=registry)
    assert "# HELP hubstream_dlq_messages_total Messages sent to a DLQ\n" in text
    assert "# TYPE hubstream_dlq_messages_total counter\n" in text
    assert "# TYPE hubstream_retries_total counter\n" in text
    assert "# TYPE hubstream_rq_depth gauge\n" in text
    assert "_created" not in text and "_total_total" not in text
    samples = _samples(text)
    assert samples[("hubstream_dlq_messages_total", (("subscription", "orders"),))] == 3
    assert samples[("hubstream_dlq_messages_total", (("subscription", "bills"),))] == 1
    assert samples[("hubstream_retries_total", ())] == 4
    assert samples[("hubstream_rq_depth", ())] == 5
    assert len(samples) == 4  # nothing else: no process_* or python_* series in the project registry
    assert all(LINE.match(line) for line in text.splitlines() if not line.startswith("#"))


def test_a_name_is_declared_once_per_registry() -> None:
    registry = CollectorRegistry()
    metrics.counter("x", "x", ("a",), registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        metrics.gauge("x", "x", ("a",), registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        metrics.counter("x_total", "x", ("b",), registry=registry)
    metrics.counter("x", "x", ("a",), registry=CollectorRegistry())  # another registry is independent


def test_bad_names_labels_and_negative_increments_are_refused() -> None:
    registry = CollectorRegistry()
    with pytest.raises(ValueError, match="invalid metric name"):
        metrics.counter("bad-name", "x", registry=registry)  # a UTF-8 name would be mangled in 0.0.4
    with pytest.raises(ValueError, match="label"):
        metrics.counter("ok", "x", ("bad-label",), registry=registry)
    with pytest.raises(ValueError, match="le"):
        metrics.histogram("h_seconds", "x", ("le",), registry=registry)
    family = metrics.counter("ok", "x", ("a",), registry=registry)
    with pytest.raises(ValueError, match="non-negative"):
        family.labels(a="1").inc(-1)
    with pytest.raises(ValueError, match="label"):
        family.labels(b="1")


def test_histogram_default_buckets_are_the_documented_ones_cumulative_with_sum_and_count() -> None:
    registry = CollectorRegistry()
    latency = metrics.histogram("req_seconds", "latency", ("method",), registry=registry)
    for value in (0.0005, 0.05, 0.5, 0.5, 30.0):
        latency.labels(method="GET").observe(value)
    text = _render(registry=registry)
    assert "# TYPE req_seconds histogram\n" in text
    [family] = text_string_to_metric_families(text)
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name == "req_seconds_bucket"}
    bounds = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
    assert sorted(float(le) for le in buckets) == [*bounds, float("inf")]
    by_bound = {float(le): n for le, n in buckets.items()}
    assert by_bound[0.001] == 1 and by_bound[0.05] == 2 and by_bound[0.5] == 4 and by_bound[10.0] == 4
    assert by_bound[float("inf")] == 5
    counts = [by_bound[b] for b in sorted(by_bound)]
    assert counts == sorted(counts)  # cumulative
    samples = _samples(text)
    assert samples[("req_seconds_count", (("method", "GET"),))] == 5
    assert samples[("req_seconds_sum", (("method", "GET"),))] == pytest.approx(31.0505)


class _Lag:
    def __init__(self, shard: str, value: float) -> None:
        self.shard, self.value = shard, value

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("lag_records", "lag", labels=["shard"])
        family.add_metric([self.shard], self.value)
        yield family


def test_registered_and_per_scrape_collectors_render_after_the_families() -> None:
    registry = CollectorRegistry()
    metrics.gauge("depth", "depth", registry=registry).set(2)
    registry.register(_Lag("0", 3))  # computed at every scrape
    text = _render(_Lag("1", 4), registry=registry)  # made for this scrape only
    assert text.index("# TYPE depth gauge") < text.index("# TYPE lag_records gauge")
    samples = _samples(text)
    assert samples[("lag_records", (("shard", "0"),))] == 3
    assert samples[("lag_records", (("shard", "1"),))] == 4
    assert samples[("depth", ())] == 2


@given(st.text(max_size=40))
def test_any_label_value_is_escaped_into_one_line_and_parses_back(value: str) -> None:
    registry = CollectorRegistry()
    metrics.gauge("g", "help", ("v",), registry=registry).labels(v=value).set(1)
    text = _render(registry=registry)
    # The format separates lines with \n only (a raw \r in a value is legal).
    lines = [line for line in text.split("\n") if line and not line.startswith("#")]
    assert len(lines) == 1 and LINE.match(lines[0]), lines
    assert _samples(text) == {("g", (("v", value),)): 1.0}


def test_the_content_type_is_the_text_format_the_body_is_written_in() -> None:
    assert metrics.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


# -- the worker's families, as tests/integration/web/test_dashboard.py reads them from /metrics ---------


def _cosmos_call(method: str, status: int) -> None:
    request = SimpleNamespace(context={})
    metrics.cosmos_request_hook(request)
    response = SimpleNamespace(
        context=request.context,
        http_request=SimpleNamespace(method=method),
        http_response=SimpleNamespace(status_code=status),
    )
    metrics.cosmos_response_hook(response)


async def _http_call(route: str, handler: Any) -> None:
    request = SimpleNamespace(
        method="GET",
        match_info=SimpleNamespace(route=SimpleNamespace(resource=SimpleNamespace(canonical=route))),
    )
    await metrics.http_middleware()(request, handler)


DASHBOARD: dict[str, Any] = {
    "composite_topics": [
        {"name": "t", "produce_pointer": 1, "storage_topics": [{"name": "t", "records": 5}]}
    ],
    "subscriptions": [
        {
            "name": "s",
            "dlq_depth": 3,
            "blocked_groups": ["g"],
            "shards": [{"shard": 0, "mq_lag": 4, "rq_lag": 1}, {"shard": 1, "mq_lag": 0, "rq_lag": 0}],
        }
    ],
    "pipelines": [{"name": "p", "writers": [{"name": "mysql", "lag": 9}]}],
    "batches": [
        {"kind": "exact", "batch_id": "7", "is_complete": False, "acked_items": 4, "total_items": 10}
    ],
    "hub": {"actors": [{"actor": "a", "depth": 6}], "total_depth": 6, "behind": 1},
    "shards": [
        {"subscription": "s", "shard": 0, "delivered": 5, "dead_lettered": 1, "failures": 2, "sidelined": 3}
    ],
}


async def test_the_worker_exposes_the_families_its_integration_test_reads() -> None:
    def count(key: Key) -> float:
        return _samples(metrics.render().decode()).get(key, 0.0)

    cosmos = ("hubstream_cosmos_requests_total", (("method", "POST"), ("status", "200")))
    cosmos_timed = ("hubstream_cosmos_request_seconds_count", (("method", "POST"),))
    served = (
        "hubstream_http_requests_total",
        (("method", "GET"), ("route", "/api/dashboard"), ("status", "200")),
    )
    missing = ("hubstream_http_requests_total", (("method", "GET"), ("route", "/api/x"), ("status", "404")))
    before = {key: count(key) for key in (cosmos, cosmos_timed, served, missing)}  # the registry is global

    _cosmos_call("POST", 200)

    async def ok(request: Any) -> Any:
        return SimpleNamespace(status=200)

    async def not_found(request: Any) -> Any:
        raise web.HTTPNotFound()

    await _http_call("/api/dashboard", ok)
    with pytest.raises(web.HTTPNotFound):
        await _http_call("/api/x", not_found)

    text = metrics.render(DashboardCollector(DASHBOARD)).decode()  # what agents/web.py serves
    samples = _samples(text)
    for key in (cosmos, cosmos_timed, served, missing):
        assert samples[key] == before[key] + 1, key
    assert "# TYPE hubstream_subscription_lag_records gauge\n" in text
    assert "# TYPE hubstream_cosmos_requests_total counter\n" in text
    assert "# TYPE hubstream_cosmos_request_seconds histogram\n" in text
    lag = "hubstream_subscription_lag_records"
    assert samples[(lag, (("queue", "mq"), ("shard", "0"), ("subscription", "s")))] == 4
    assert samples[(lag, (("queue", "rq"), ("shard", "1"), ("subscription", "s")))] == 0
    assert samples[("hubstream_subscription_dlq_depth", (("subscription", "s"),))] == 3
    assert samples[("hubstream_batch_items", (("state", "acked"),))] == 4
    assert samples[("hubstream_batch_items", (("state", "total"),))] == 10
    assert samples[("hubstream_pipeline_writer_lag_records", (("pipeline", "p"), ("writer", "mysql")))] == 9
    assert samples[("hubstream_hub_queue_depth", ())] == 6
    assert not [key for key in samples if dict(key[1]).keys() & {"actor", "batch"}], (
        "no per-actor/batch series"
    )
    assert all(LINE.match(line) for line in text.splitlines() if not line.startswith("#"))
    assert text.count("# TYPE hubstream_subscription_lag_records ") == 1  # one family per name


def test_every_exposed_family_parses_back_with_its_type_and_the_names_the_docs_list() -> None:
    text = metrics.render(DashboardCollector(DASHBOARD)).decode()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    # prometheus_client's parser names a counter family without its `_total` sample suffix.
    assert families == {
        "hubstream_cosmos_requests": "counter",
        "hubstream_cosmos_request_seconds": "histogram",
        "hubstream_http_requests": "counter",
        "hubstream_http_request_seconds": "histogram",
        "hubstream_composite_records": "gauge",
        "hubstream_composite_produce_pointer": "gauge",
        "hubstream_subscription_lag_records": "gauge",
        "hubstream_subscription_dlq_depth": "gauge",
        "hubstream_subscription_blocked_groups": "gauge",
        "hubstream_pipeline_writer_lag_records": "gauge",
        "hubstream_batch_items": "gauge",
        "hubstream_batches_open": "gauge",
        "hubstream_hub_queue_depth": "gauge",
        "hubstream_hub_queue_depth_max": "gauge",
        "hubstream_hub_actors_behind": "gauge",
        "hubstream_build_info": "gauge",
        "process_virtual_memory_bytes": "gauge",
        "process_resident_memory_bytes": "gauge",
        "process_start_time_seconds": "gauge",
        "process_cpu_seconds": "counter",
        "process_open_fds": "gauge",
        "process_max_fds": "gauge",
        "hubstream_subscription_delivered": "counter",
        "hubstream_subscription_dead_lettered": "counter",
        "hubstream_subscription_failures": "counter",
        "hubstream_subscription_sidelined": "counter",
        "hubstream_subscription_late_records": "gauge",
    }
    for name, kind in families.items():
        exposed = f"{name}_total" if kind == "counter" else name
        assert f"# TYPE {exposed} {kind}\n" in text and f"# HELP {exposed} " in text


def test_a_pipeline_process_scrape_names_its_writers_and_no_batch_or_actor() -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from app.observability import metrics
    from app.observability.scrape import PipelineCollector

    pipelines = [
        {
            "name": "p",
            "running": True,
            "end_offset": 40,
            "writers": [{"name": "w", "lag": 3, "offset": 36, "stopped": True, "dead_lettered": 2}],
        },
        {"name": "q", "running": False, "writers": []},
    ]
    text = metrics.render(PipelineCollector(pipelines), registry=CollectorRegistry()).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    writer = (("pipeline", "p"), ("writer", "w"))
    assert samples[("hubstream_pipeline_writer_lag_records", writer)] == 3
    assert samples[("hubstream_pipeline_writer_offset", writer)] == 36
    assert samples[("hubstream_pipeline_writer_stopped", writer)] == 1
    assert samples[("hubstream_pipeline_writer_dead_lettered_total", writer)] == 2
    assert samples[("hubstream_pipeline_commit_log_end_offset", (("pipeline", "p"),))] == 40
    assert samples[("hubstream_pipeline_running", (("pipeline", "p"),))] == 1
    assert samples[("hubstream_pipeline_running", (("pipeline", "q"),))] == 0
    assert ("hubstream_pipeline_commit_log_end_offset", (("pipeline", "q"),)) not in samples
