"""Scrape-time Prometheus samples derived from the dashboard's data (lag, depth, progress, throughput)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.observability.metrics import Sample

__all__ = ["dashboard_samples", "shard_samples"]


def _g(name: str, help_text: str, value: float, **labels: object) -> Sample:
    return Sample(name, "gauge", help_text, float(value), {k: str(v) for k, v in labels.items()})


def _c(name: str, help_text: str, value: float, **labels: object) -> Sample:
    return Sample(name, "counter", help_text, float(value), {k: str(v) for k, v in labels.items()})


def dashboard_samples(data: dict[str, Any]) -> Iterator[Sample]:
    """Gauges for the global sections, counters for this worker's shard runners."""
    for topic in data.get("composite_topics") or []:
        for storage in topic["storage_topics"]:
            yield _g(
                "hubstream_composite_records",
                "Records in a storage topic (sum of true end offsets)",
                storage["records"],
                topic=topic["name"],
                storage=storage["name"],
            )
        yield _g(
            "hubstream_composite_produce_pointer",
            "Index of the storage topic producers write to",
            topic["produce_pointer"],
            topic=topic["name"],
        )
    for sub in data.get("subscriptions") or []:
        name = sub["name"]
        for shard in sub["shards"]:
            for queue in ("mq", "rq"):
                yield _g(
                    "hubstream_subscription_lag_records",
                    "Unconsumed records per shard and queue",
                    shard[f"{queue}_lag"],
                    subscription=name,
                    shard=shard["shard"],
                    queue=queue,
                )
        yield _g(
            "hubstream_subscription_dlq_depth", "Records in the DLQ", sub["dlq_depth"], subscription=name
        )
        yield _g(
            "hubstream_subscription_blocked_groups",
            "Groups blocked behind a DLQ record",
            len(sub.get("blocked_groups", [])),
            subscription=name,
        )
    for pipeline in data.get("pipelines") or []:
        for writer in pipeline["writers"]:
            yield _g(
                "hubstream_pipeline_writer_lag_records",
                "Commit-log records a writer has not confirmed",
                writer["lag"],
                pipeline=pipeline["name"],
                writer=writer["name"],
            )
    for batch in data.get("batches") or []:
        if batch["kind"] == "exact" and not batch["isComplete"]:
            for state in ("acked", "total"):
                yield _g(
                    "hubstream_batch_items",
                    "Items of an open exact batch (acked and total)",
                    batch[f"{state}Items"],
                    batch=batch["batchId"],
                    state=state,
                )
    yield _g(
        "hubstream_batches_open",
        "Batches not complete",
        sum(1 for b in data.get("batches") or [] if not b["isComplete"]),
    )
    hub = data.get("hub")
    if hub:
        for row in hub["actors"]:
            yield _g(
                "hubstream_hub_queue_depth",
                "Unacknowledged events per actor",
                row["depth"],
                actor=row["actor"],
            )


def shard_samples(shards: list[dict[str, Any]]) -> Iterator[Sample]:
    """This worker's shard runner counters (reset when a runner restarts, as Prometheus expects)."""
    for shard in shards:
        labels = {"subscription": shard["subscription"], "shard": shard["shard"]}
        yield _c("hubstream_subscription_delivered_total", "Messages delivered", shard["delivered"], **labels)
        yield _c(
            "hubstream_subscription_dead_lettered_total",
            "Messages sent to the DLQ",
            shard["dead_lettered"],
            **labels,
        )
        yield _c(
            "hubstream_subscription_failures_total",
            "Delivery failures (each retried via RQ or dead-lettered)",
            shard["failures"],
            **labels,
        )
        yield _c(
            "hubstream_subscription_sidelined_total",
            "Messages sidelined to RQ behind a failed message of their group",
            shard["sidelined"],
            **labels,
        )
