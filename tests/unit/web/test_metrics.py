"""The Prometheus text exposition: families, labels, escaping, histograms, collectors."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.observability.metrics import Registry, Sample

LINE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? \S+$', re.S
)


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if not line.startswith("#")
    }


def test_counter_and_gauge_render_with_help_type_and_labels() -> None:
    registry = Registry()
    dlq = registry.counter("hubstream_dlq_messages_total", "Messages sent to a DLQ", ("subscription",))
    dlq.inc(subscription="orders")
    dlq.inc(2, subscription="orders")
    dlq.inc(subscription="bills")
    depth = registry.gauge("hubstream_rq_depth", "Records in RQ")
    depth.set(7)
    depth.dec(2)
    text = registry.render()
    assert "# HELP hubstream_dlq_messages_total Messages sent to a DLQ" in text
    assert "# TYPE hubstream_dlq_messages_total counter" in text
    assert "# TYPE hubstream_rq_depth gauge" in text
    samples = _samples(text)
    assert samples['hubstream_dlq_messages_total{subscription="orders"}'] == 3
    assert samples['hubstream_dlq_messages_total{subscription="bills"}'] == 1
    assert samples["hubstream_rq_depth"] == 5
    assert all(LINE.match(line) for line in text.splitlines() if line and not line.startswith("#"))


def test_declaring_twice_returns_the_same_family_and_conflicts_raise() -> None:
    registry = Registry()
    first = registry.counter("x_total", "x", ("a",))
    assert registry.counter("x_total", "x", ("a",)) is first
    with pytest.raises(ValueError, match="already declared"):
        registry.gauge("x_total", "x", ("a",))
    with pytest.raises(ValueError, match="already declared"):
        registry.counter("x_total", "x", ("b",))


def test_bad_names_labels_and_negative_increments_are_refused() -> None:
    registry = Registry()
    with pytest.raises(ValueError, match="invalid metric name"):
        registry.counter("bad-name", "x")
    with pytest.raises(ValueError, match="invalid label name"):
        registry.counter("ok_total", "x", ("bad-label",))
    family = registry.counter("ok_total", "x", ("a",))
    with pytest.raises(ValueError, match="only goes up"):
        family.inc(-1, a="1")
    with pytest.raises(ValueError, match="takes labels"):
        family.inc(b="1")


def test_histogram_buckets_are_cumulative_with_sum_and_count() -> None:
    registry = Registry()
    latency = registry.histogram("req_seconds", "latency", ("method",), buckets=(0.1, 1.0))
    for value in (0.05, 0.5, 0.5, 3.0):
        latency.observe(value, method="GET")
    samples = _samples(registry.render())
    assert samples['req_seconds_bucket{method="GET",le="0.1"}'] == 1
    assert samples['req_seconds_bucket{method="GET",le="1"}'] == 3
    assert samples['req_seconds_bucket{method="GET",le="+Inf"}'] == 4
    assert samples['req_seconds_count{method="GET"}'] == 4
    assert samples['req_seconds_sum{method="GET"}'] == pytest.approx(4.05)


def test_collectors_and_extra_samples_render_grouped_by_name() -> None:
    registry = Registry()
    registry.register_collector(lambda: [Sample("lag_records", "gauge", "lag", 3, {"shard": "0"})])
    text = registry.render([Sample("lag_records", "gauge", "lag", 4, {"shard": "1"})])
    assert text.count("# TYPE lag_records gauge") == 1
    samples = _samples(text)
    assert samples['lag_records{shard="0"}'] == 3 and samples['lag_records{shard="1"}'] == 4


@given(st.text(max_size=40))
def test_any_label_value_is_escaped_into_one_valid_line(value: str) -> None:
    registry = Registry()
    registry.gauge("g", "help", ("v",)).set(1, v=value)
    # The format separates lines with \n only (a raw \r in a value is legal).
    lines = [line for line in registry.render().split("\n") if line and not line.startswith("#")]
    assert len(lines) == 1 and LINE.match(lines[0]), lines
