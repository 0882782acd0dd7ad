"""Scrape-time Prometheus families derived from the dashboard's data (lag, depth, progress, throughput)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

__all__ = ["DashboardCollector", "PipelineCollector"]


class DashboardCollector:
    """A prometheus_client collector made for one scrape: the figures of `data` (the dashboard's global
    and local sections, `shards` included)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        _dashboard(self._data, families)
        _shards(self._data.get("shards") or [], families)
        yield from families.by_name.values()


class PipelineCollector:
    """The same for a pipeline process's `/metrics`: whether each pipeline runs, its commit-log end
    and writers (`pipelines`: [{"name", "running", "end_offset", "writers": [{"name", "lag",
    "offset", "stopped", "dead_lettered"}]}]; a pipeline not running has no end offset and no
    writers)."""

    def __init__(self, pipelines: list[dict[str, Any]]) -> None:
        self._pipelines = pipelines

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        _pipelines(self._pipelines, families)
        for pipeline in self._pipelines:
            families.gauge(
                "hubstream_pipeline_running",
                "1 while the pipeline runs, 0 while it starts or stops",
                int(pipeline["running"]),
                pipeline=pipeline["name"],
            )
            if not pipeline["running"]:
                continue
            families.gauge(
                "hubstream_pipeline_commit_log_end_offset",
                "Entries in the pipeline's commit log",
                pipeline["end_offset"],
                pipeline=pipeline["name"],
            )
            for writer in pipeline["writers"]:
                labels = {"pipeline": pipeline["name"], "writer": writer["name"]}
                families.gauge(
                    "hubstream_pipeline_writer_offset",
                    "A writer's confirmed offset",
                    writer["offset"],
                    **labels,
                )
                families.gauge(
                    "hubstream_pipeline_writer_stopped",
                    "1 while a writer is stopped",
                    int(writer["stopped"]),
                    **labels,
                )
                families.counter(
                    "hubstream_pipeline_writer_dead_lettered_total",
                    "Records a writer sent to the pipeline's dead-letter topic since the process started",
                    writer.get("dead_lettered", 0),
                    **labels,
                )
        yield from families.by_name.values()


class _Families:
    """Families by name, filled one sample at a time."""

    def __init__(self) -> None:
        self.by_name: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def gauge(self, name: str, help_text: str, value: float, **labels: object) -> None:
        self._add(GaugeMetricFamily, name, help_text, value, labels)

    def counter(self, name: str, help_text: str, value: float, **labels: object) -> None:
        """`name` ends with `_total`, the name of its sample (the family's name drops it)."""
        self._add(CounterMetricFamily, name, help_text, value, labels)

    def _add(
        self,
        make: type[GaugeMetricFamily | CounterMetricFamily],
        name: str,
        help_text: str,
        value: float,
        labels: dict[str, object],
    ) -> None:
        family = self.by_name.get(name)
        if family is None:
            family = self.by_name[name] = make(name, help_text, labels=list(labels))
        family.add_metric([str(v) for v in labels.values()], float(value))


def _dashboard(data: dict[str, Any], out: _Families) -> None:
    """Gauges for the global sections."""
    for topic in data.get("composite_topics") or []:
        for storage in topic["storage_topics"]:
            out.gauge(
                "hubstream_composite_records",
                "Records in a storage topic (sum of true end offsets)",
                storage["records"],
                topic=topic["name"],
                storage=storage["name"],
            )
        out.gauge(
            "hubstream_composite_produce_pointer",
            "Index of the storage topic producers write to",
            topic["produce_pointer"],
            topic=topic["name"],
        )
    for sub in data.get("subscriptions") or []:
        name = sub["name"]
        for shard in sub["shards"]:
            for queue in ("mq", "rq"):
                out.gauge(
                    "hubstream_subscription_lag_records",
                    "Unconsumed records per shard and queue",
                    shard[f"{queue}_lag"],
                    subscription=name,
                    shard=shard["shard"],
                    queue=queue,
                )
        out.gauge(
            "hubstream_subscription_dlq_depth", "Records in the DLQ", sub["dlq_depth"], subscription=name
        )
        out.gauge(
            "hubstream_subscription_blocked_groups",
            "Groups blocked behind a DLQ record",
            len(sub.get("blocked_groups", [])),
            subscription=name,
        )
    _pipelines(data.get("pipelines") or [], out)
    # Totals only: a label per batch id or per actor would grow a series for each of them (the
    # dashboard and the batch API name them).
    open_exact = [b for b in data.get("batches") or [] if b["kind"] == "exact" and not b["is_complete"]]
    for state in ("acked", "total"):
        out.gauge(
            "hubstream_batch_items",
            "Items of the open exact batches (acked and total)",
            sum(b[f"{state}_items"] for b in open_exact),
            state=state,
        )
    out.gauge(
        "hubstream_batches_open",
        "Batches not complete",
        sum(1 for b in data.get("batches") or [] if not b["is_complete"]),
    )
    hub = data.get("hub")
    if hub:  # exact totals over every actor (app/hub/depths.py); rows are the most behind first
        depths = [row["depth"] for row in hub["actors"]]
        out.gauge("hubstream_hub_queue_depth", "Unacknowledged events of all actors", hub["total_depth"])
        out.gauge(
            "hubstream_hub_queue_depth_max",
            "Unacknowledged events of the most behind actor",
            max(depths, default=0),
        )
        out.gauge("hubstream_hub_actors_behind", "Actors with unacknowledged events", hub.get("behind", 0))


def _shards(shards: list[dict[str, Any]], out: _Families) -> None:
    """This worker's shard runner counters (reset when a runner restarts, as Prometheus expects)."""
    for shard in shards:
        labels = {"subscription": shard["subscription"], "shard": shard["shard"]}
        out.counter(
            "hubstream_subscription_delivered_total", "Messages delivered", shard["delivered"], **labels
        )
        out.counter(
            "hubstream_subscription_dead_lettered_total",
            "Messages sent to the DLQ",
            shard["dead_lettered"],
            **labels,
        )
        out.counter(
            "hubstream_subscription_failures_total",
            "Delivery failures (each retried via RQ or dead-lettered)",
            shard["failures"],
            **labels,
        )
        out.counter(
            "hubstream_subscription_sidelined_total",
            "Messages sidelined to RQ behind a failed message of their group",
            shard["sidelined"],
            **labels,
        )
        out.gauge(
            "hubstream_subscription_late_records",
            "Records that landed in MQ storage topics after the shard left them: not delivered",
            shard.get("late_records", 0),
            **labels,
        )


def _pipelines(pipelines: list[dict[str, Any]], out: _Families) -> None:
    for pipeline in pipelines:
        for writer in pipeline["writers"]:
            out.gauge(
                "hubstream_pipeline_writer_lag_records",
                "Commit-log records a writer has not confirmed",
                writer["lag"],
                pipeline=pipeline["name"],
                writer=writer["name"],
            )
