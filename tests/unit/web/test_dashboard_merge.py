"""Pure parts of the dashboard: batch selection, shard merge, the families of its scrape."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from app.dashboard.dashboard import merge_shards
from app.dashboard.sources import select_batches
from app.observability import metrics
from app.observability.scrape import DashboardCollector


def _batch(batch_id: int, complete: bool, updated: int) -> dict[str, Any]:
    return {"batch_id": str(batch_id), "is_complete": complete, "updated_at_ms": updated, "kind": "exact"}


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), max_size=60),
    st.integers(0, 5),
    st.integers(0, 40),
)
def test_select_batches_keeps_open_first_then_newest_complete(
    specs: list[tuple[bool, int]], max_complete: int, max_total: int
) -> None:
    batches = [_batch(i, complete, updated) for i, (complete, updated) in enumerate(specs)]
    chosen = select_batches(batches, max_complete, max_total)
    open_ = [b for b in batches if not b["is_complete"]]
    assert len(chosen) == min(max_total, len(open_) + min(max_complete, len(batches) - len(open_)))
    flags = [b["is_complete"] for b in chosen]
    assert flags == sorted(flags)  # no open batch after a complete one
    assert sum(flags) <= max_complete
    for group in (False, True):
        times = [b["updated_at_ms"] for b in chosen if b["is_complete"] is group]
        assert times == sorted(times, reverse=True)


def test_merge_shards_attaches_runner_worker_counters_and_blocked_groups() -> None:
    subs: list[dict[str, Any]] = [
        {
            "name": "s",
            "shards": [{"shard": 0, "mq_lag": 1, "rq_lag": 0}, {"shard": 1, "mq_lag": 2, "rq_lag": 0}],
        }
    ]
    runners: list[dict[str, Any]] = [
        {
            "subscription": "s",
            "shard": 1,
            "worker": "http://w2",
            "running": True,
            "delivered": 7,
            "dead_lettered": 1,
            "failures": 2,
            "sidelined": 0,
            "blocked_groups": ["g2", "g1"],
        }
    ]
    merge_shards(subs, runners)
    first, second = subs[0]["shards"]
    assert first["worker"] is None and first["running"] is False and first["blocked_groups"] == []
    assert second["worker"] == "http://w2" and second["delivered"] == 7
    assert subs[0]["blocked_groups"] == ["g1", "g2"]


def test_the_scrape_families_carry_the_dashboard_figures() -> None:
    data = {
        "composite_topics": [
            {
                "name": "t",
                "produce_pointer": 1,
                "storage_topics": [{"name": "t", "records": 5}, {"name": "t-1", "records": 2}],
            }
        ],
        "subscriptions": [
            {
                "name": "s",
                "dlq_depth": 3,
                "blocked_groups": ["g"],
                "shards": [{"shard": 0, "mq_lag": 4, "rq_lag": 1}],
            }
        ],
        "pipelines": [{"name": "p", "writers": [{"name": "w", "lag": 9}]}],
        "batches": [
            {"kind": "exact", "batch_id": "1", "is_complete": False, "acked_items": 4, "total_items": 10},
            {"kind": "exact", "batch_id": "2", "is_complete": True, "acked_items": 3, "total_items": 3},
        ],
        "hub": {"actors": [{"actor": "a", "depth": 6}], "total_depth": 6, "behind": 1},
        "shards": [
            {
                "subscription": "s",
                "shard": 0,
                "delivered": 5,
                "dead_lettered": 1,
                "failures": 2,
                "sidelined": 3,
            }
        ],
    }
    # Rendered alone (an empty registry besides) and read back as Prometheus would.
    text = metrics.render(DashboardCollector(data), registry=CollectorRegistry()).decode()
    families = list(text_string_to_metric_families(text))
    kinds = {f.name: f.type for f in families}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    assert samples[("hubstream_composite_records", (("storage", "t-1"), ("topic", "t")))] == 2
    assert samples[("hubstream_composite_produce_pointer", (("topic", "t"),))] == 1
    assert (
        samples[
            ("hubstream_subscription_lag_records", (("queue", "rq"), ("shard", "0"), ("subscription", "s")))
        ]
        == 1
    )
    assert samples[("hubstream_subscription_dlq_depth", (("subscription", "s"),))] == 3
    assert samples[("hubstream_subscription_blocked_groups", (("subscription", "s"),))] == 1
    assert samples[("hubstream_pipeline_writer_lag_records", (("pipeline", "p"), ("writer", "w")))] == 9
    assert samples[("hubstream_batch_items", (("state", "acked"),))] == 4  # the open batch only
    assert samples[("hubstream_batches_open", ())] == 1
    assert samples[("hubstream_hub_queue_depth", ())] == 6
    shard = (("shard", "0"), ("subscription", "s"))
    assert samples[("hubstream_subscription_delivered_total", shard)] == 5
    assert samples[("hubstream_subscription_dead_lettered_total", shard)] == 1
    assert samples[("hubstream_subscription_failures_total", shard)] == 2
    assert samples[("hubstream_subscription_sidelined_total", shard)] == 3
    assert kinds["hubstream_subscription_lag_records"] == "gauge"
    assert kinds["hubstream_subscription_delivered"] == "counter"  # the parser drops `_total`
    assert "# TYPE hubstream_subscription_delivered_total counter\n" in text
    assert len(kinds) == len(families)  # one family per name: samples of a name are grouped


def test_an_empty_dashboard_still_says_how_many_batches_are_open() -> None:
    text = metrics.render(DashboardCollector({}), registry=CollectorRegistry()).decode()
    assert text.splitlines() == [
        "# HELP hubstream_batch_items Items of the open exact batches (acked and total)",
        "# TYPE hubstream_batch_items gauge",
        'hubstream_batch_items{state="acked"} 0.0',
        'hubstream_batch_items{state="total"} 0.0',
        "# HELP hubstream_batches_open Batches not complete",
        "# TYPE hubstream_batches_open gauge",
        "hubstream_batches_open 0.0",
    ]
