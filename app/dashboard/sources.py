"""Read-only queries behind the dashboard, one per capability, over what each already stores.

Global sections (the same from any worker) read Kafka and Cosmos: composite topics, subscription
lag, pipelines, hub queue depth. Local sections read this worker's in-memory state: its subscription
shards (counters, blocked groups) and the batches in the batch-table partitions it serves.
Synchronous functions here are run in a thread by app.dashboard.dashboard.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.batch.model import ESTIMATED_PREFIX, EXACT_PREFIX, EstimatedBatch, ExactBatch
from app.composite.store import MetadataStore
from app.kafka.admin import KafkaAdmin
from app.kafka.broker import broker_for
from app.pipeline.kafka_log import PipelineTopics, log_end
from app.pipeline.state import read_state, split_states
from app.settings import Settings
from app.subscription.ops import lag_report

__all__ = [
    "batches_local",
    "composite_section",
    "hub_section",
    "pipelines_section",
    "subscriptions_section",
]

PIPELINE_LOG_PREFIX = "hubstream.pipeline."
PIPELINE_LOG_SUFFIX = ".log"


def composite_section(metadata: MetadataStore) -> list[dict[str, Any]]:
    """Every composite topic: storage topics with K, partitions and true end offsets; the produce pointer."""
    topics = metadata.refresh()
    tps = [
        (storage.name, p)
        for topic in topics.values()
        for storage in topic.storage_topics
        for p in range(storage.partitions)
    ]
    ends = dict(zip(tps, metadata.broker.end_offsets(tps), strict=True)) if tps else {}
    out: list[dict[str, Any]] = []
    for name in sorted(topics):
        topic = topics[name]
        storage_topics = []
        for index, storage in enumerate(topic.storage_topics):
            offsets = [ends[(storage.name, p)] for p in range(storage.partitions)]
            storage_topics.append(
                {
                    "index": index,
                    "name": storage.name,
                    "partitions": storage.partitions,
                    "k": storage.k,
                    "produce": index == topic.produce_pointer,
                    "end_offsets": offsets,
                    "records": sum(offsets),
                }
            )
        out.append(
            {
                "name": name,
                "version": topic.version,
                "produce_pointer": topic.produce_pointer,
                "k": topic.storage_topics[topic.produce_pointer].k,
                "records": sum(s["records"] for s in storage_topics),
                "storage_topics": storage_topics,
            }
        )
    return out


def subscriptions_section(registry: Any, metadata: MetadataStore, settings: Settings) -> list[dict[str, Any]]:
    """Every subscription's definition and lag per shard (MQ, RQ), RQ depth and DLQ depth (parked
    dead letters, by the group states of `settings`' app id)."""

    out: list[dict[str, Any]] = []
    for name, sub in sorted(registry.refresh().items()):
        entry: dict[str, Any] = {
            "name": name,
            "topic": sub.topic,
            "status": sub.status.value,
            "shard_count": sub.shard_count,
            "epoch": sub.epoch,
            "on_dlq": sub.on_dlq.value,
        }
        try:
            lag = lag_report(settings, registry, metadata, name)
        except Exception as exc:  # one broken subscription (e.g. a deleted topic) must not hide the others
            entry.update(shards=[], mq_lag=0, rq_depth=0, dlq_depth=0, error=f"{type(exc).__name__}: {exc}")
        else:
            shards = lag["shards"]
            entry.update(
                shards=shards,
                mq_lag=sum(s["mq_lag"] for s in shards),
                rq_depth=sum(s["rq_lag"] for s in shards),
                dlq_depth=lag["dlq_depth"],
            )
        out.append(entry)
    return out


def pipelines_section(settings: Settings) -> list[dict[str, Any]]:
    """Pipelines of this deployment (commit log + offsets changelog under HUBSTREAM_APP_ID): each
    writer's next offset against the commit log's end."""

    existing = KafkaAdmin(settings.bootstrap).topics()
    names = sorted(
        t[len(PIPELINE_LOG_PREFIX) : -len(PIPELINE_LOG_SUFFIX)]
        for t in existing
        if t.startswith(PIPELINE_LOG_PREFIX) and t.endswith(PIPELINE_LOG_SUFFIX)
    )
    out: list[dict[str, Any]] = []
    for name in names:
        topics = PipelineTopics.of(name, settings.app_id)
        if topics.changelog not in existing:
            continue  # another deployment's pipeline (or one that never ran)
        try:
            out.append(_pipeline(settings, topics))
        except Exception as exc:  # one broken pipeline must not hide the others
            out.append(
                {
                    "name": name,
                    "commit_log": topics.log,
                    "end_offset": 0,
                    "readers": {},
                    "writers": [],
                    "error": f"{type(exc).__name__}: {exc}",
                }
            )
    return out


def _pipeline(settings: Settings, topics: Any) -> dict[str, Any]:

    state = read_state(broker_for(settings), topics.changelog, topics.control, topics.app_id)
    writers, readers = split_states(state)
    end = log_end(broker_for(settings), topics.log)
    return {
        "name": topics.name,
        "commit_log": topics.log,
        "end_offset": end,
        "readers": {ns: r.to_json() for ns, r in sorted(readers.items())},
        "writers": [
            {
                "name": writer,
                "next_offset": s.next_offset,
                "lag": max(end - s.next_offset, 0),
                "stopped": s.failed is not None,
                "error": None if s.failed is None else s.failed.error,
            }
            for writer, s in sorted(writers.items())
        ],
    }


def batches_local(service: Any, max_complete: int = 20, max_total: int = 200) -> list[dict[str, Any]]:
    """Batches in the table partitions this worker serves: every open one, then the newest complete."""

    found: list[dict[str, Any]] = []
    for partition in sorted(service.ready):
        store = service.store(partition)
        for key, raw in store.scan(EXACT_PREFIX):
            exact = ExactBatch.decode(int(key[len(EXACT_PREFIX) :]), raw)
            found.append(
                {
                    "kind": "exact",
                    "batch_id": str(exact.batch_id),
                    "user_key": exact.user_key,
                    "is_closed": exact.is_closed,
                    "is_complete": exact.is_complete,
                    "total_items": exact.total_items,
                    "acked_items": exact.total_items - exact.pending_items,
                    "pending_items": exact.pending_items,
                    "updated_at_ms": exact.updated_at_ms,
                    "partition": partition,
                }
            )
        for key, raw in store.scan(ESTIMATED_PREFIX):
            estimated = EstimatedBatch.decode(key[len(ESTIMATED_PREFIX) :].decode(), raw)
            found.append(
                {
                    "kind": "estimated",
                    "batch_id": estimated.batch_id,
                    "user_key": estimated.user_key,
                    "is_closed": estimated.is_closed,
                    "is_complete": estimated.is_complete,
                    "total_items": None,
                    "acked_items": None,
                    "pending_items": estimated.pending,
                    "updated_at_ms": estimated.updated_at_ms,
                    "partition": partition,
                }
            )
    return select_batches(found, max_complete, max_total)


def select_batches(
    found: Iterable[dict[str, Any]], max_complete: int, max_total: int
) -> list[dict[str, Any]]:
    """Open batches first (newest activity first), then at most `max_complete` complete ones."""
    newest_first = sorted(found, key=lambda b: (-b["updated_at_ms"], b["batch_id"]))
    open_ = [b for b in newest_first if not b["is_complete"]]
    done = [b for b in newest_first if b["is_complete"]][:max_complete]
    return (open_ + done)[:max_total]


async def hub_section(hub: Any, max_actors: int) -> dict[str, Any]:
    """Unacknowledged events per actor and domain, exact, for every actor (MessageHub.depths:
    from the counts ledgers and bundle streams keep); the `max_actors` most behind as rows."""
    depths = await hub.depths(max_queried=max_actors)
    rows = [
        {"actor": actor, "depth": sum(by_domain.values()), "by_domain": dict(sorted(by_domain.items()))}
        for actor, by_domain in depths.by_actor.items()
    ]
    rows.sort(key=lambda r: (-r["depth"], r["actor"]))
    return {
        "actors": rows[:max_actors],
        "actor_count": len(rows),
        "total_depth": depths.total,
        "truncated": len(rows) > max_actors,
        "not_measured": len(depths.not_measured),
        "behind": sum(1 for r in rows if r["depth"]),
    }
