"""Acceptance of the Spark ingest: events from a generated Parquet file -> composite topic
-> subscription (batch sink `hub`) -> Cosmos message hub, under an exact batch.

The batch completes; every valid event is peekable exactly once, and each recipient's bundles hand
its events out in the order the topic holds them; a re-run of the same input adds nothing.
Weights are 1 KB and every event bundleable, so one peek takes a whole cabinet (a recipient's
domain) and the check needs a few hundred peeks, not one per event. Every suite runs 20,000
events; `-m soak` also runs 60,000.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.composite.store import MetadataStore
from app.dataavailable import DataAvailable, parse
from app.hub import MessageHub
from app.settings import Settings
from spark_ingest.job import IngestOptions, IngestSummary, run_ingest
from spark_ingest.sample import SampleSpec, recipient_ids, sample_rows, write_sample
from tests.integration.spark_ingest.conftest import read_back
from tests.integration.spark_ingest.test_batch_api import worker, worker_env
from tests.support.soak import first_in_every_suite

# Two 60,000-event ingests through one worker into the embedded Cosmos endpoint: about 2-6 minutes
# on 2 cores, so more than the suite's default per-test timeout.
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1200)]

RECIPIENTS, INVALID = 40, 20
CAPABILITIES = ("batches", "hub", "flow", "subscriptions")
WAIT_S = 1200.0


def _write_input(path: Path, events: int) -> None:
    rows = []
    for row in sample_rows(SampleSpec(events, RECIPIENTS, INVALID, seed=11)):
        if 1024 <= row["weight"] <= 1024 * 1024:  # keep the weight defects of the invalid rows
            row = {**row, "weight": 1024, "bundleable": True}
        rows.append(row)
    write_sample(rows, path, "parquet")


def _ingest(
    spark: SparkSession, settings: Settings, path: Path, topic: str, url: str, rejects: Path
) -> IngestSummary:
    options = IngestOptions(
        path=str(path),
        topic=topic,
        rejects=rejects,
        batch=True,
        wait=True,
        batch_url=url,
        wait_timeout_s=WAIT_S,
    )
    return run_ingest(options, settings=settings, spark=spark, report=lambda _: None)


def _topic_order(settings: Settings, metadata: MetadataStore, topic: str) -> dict[str, list[DataAvailable]]:
    """Each recipient's events in the order its (single) partition holds them."""
    storage = metadata.get(topic).current
    by_recipient: dict[str, list[DataAvailable]] = defaultdict(list)
    for record in sorted(read_back(settings, storage), key=lambda r: (r.partition, r.offset)):
        event = parse(record.value)
        by_recipient[event.recipient].append(event)
    return by_recipient


async def _drain(hub: MessageHub, actor: str) -> list[list[DataAvailable]]:
    bundles: list[list[DataAvailable]] = []
    while (bundle := await hub.peek(actor)) is not None:
        bundles.append([s.event for s in bundle.events])
        await hub.dequeue(actor, bundle.bundle_id)
    return bundles


@pytest.mark.parametrize("total", first_in_every_suite([20_000, 60_000], keep=1))
async def test_events_from_parquet_reach_the_hub_once_in_order_and_a_rerun_adds_nothing(
    total: int,
    stack: Settings,
    spark: SparkSession,
    metadata: MetadataStore,
    subscription: tuple[str, str],
    hub_settings: Settings,
    unique: str,
    tmp_path: Path,
) -> None:
    topic, registry_topic = subscription
    source = tmp_path / "events.parquet"
    _write_input(source, total)
    env = worker_env(
        stack,
        unique,
        tmp_path / "worker",
        SUBSCRIPTION_REGISTRY_TOPIC=registry_topic,
        COSMOS_DATABASE=hub_settings.cosmos_database,
    )
    hub = await MessageHub.open(hub_settings)
    try:
        with worker(env, tmp_path / "worker.log", CAPABILITIES, timeout_s=180.0) as url:
            started = time.monotonic()
            first = _ingest(spark, stack, source, topic, url, tmp_path / "rejects-1.jsonl")
            first_s = time.monotonic() - started
            assert (first.rows_read, first.rejected, first.produced) == (total, INVALID, total - INVALID)
            assert first.batch_complete is True, f"the batch did not complete in {WAIT_S:.0f} s"

            expected = _topic_order(stack, metadata, topic)
            assert sorted(expected) == recipient_ids(RECIPIENTS)
            delivered = 0
            for actor, events in expected.items():
                bundles = await _drain(hub, actor)
                got = [e for bundle in bundles for e in bundle]
                assert sorted(e.id for e in got) == sorted(e.id for e in events), actor  # each once
                by_id = {e.id: e for e in events}
                assert all(by_id[e.id] == e for e in got), actor  # as produced
                for bundle in bundles:  # one cabinet per bundle, in the topic's order
                    cabinet = [e for e in events if e.origin == bundle[0].origin]
                    assert [e.id for e in bundle] == [e.id for e in cabinet], actor
                delivered += len(got)
            assert delivered == total - INVALID

            second = _ingest(spark, stack, source, topic, url, tmp_path / "rejects-2.jsonl")
            assert second.produced == total - INVALID and second.batch_complete is True
            assert second.batch_id != first.batch_id
            for actor in expected:
                assert await hub.depth(actor) == {}, actor
                assert await hub.peek(actor) is None, actor  # the re-run added nothing
    finally:
        await hub.close()
    print(f"first run: {total:,} events ingested and saved in the hub in {first_s:.0f} s")
