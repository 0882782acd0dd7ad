"""`hubstream spark ingest --master spark://…` on a real Spark standalone cluster (a master and a
worker JVM from pyspark's own spark-class, tests/support/spark_cluster.py): the job runs on the
cluster's executor, under an exact batch, into a subscription whose batch sink is the Cosmos
message hub. The batch completes and every valid event reaches its actor exactly once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from app.composite.store import MetadataStore
from app.hub import MessageHub
from app.settings import Settings
from spark_ingest.sample import recipient_ids
from tests.integration.spark_ingest.test_batch_api import worker, worker_env
from tests.integration.spark_ingest.test_spark_to_hub import CAPABILITIES, _drain, _topic_order
from tests.support.spark_cluster import spark_cluster

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]
EVENTS, RECIPIENTS, INVALID = 6_000, 20, 6


async def test_an_ingest_on_a_standalone_cluster_reaches_the_hub_once(
    stack: Settings,
    metadata: MetadataStore,
    subscription: tuple[str, str],
    hub_settings: Settings,
    unique: str,
    tmp_path: Path,
) -> None:
    topic, registry_topic = subscription
    source = tmp_path / "events.parquet"
    made = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "app.cli.main",
            "spark",
            "sample",
            str(source),
            "-n",
            str(EVENTS),
            "-r",
            str(RECIPIENTS),
            "--invalid",
            str(INVALID),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    env = worker_env(
        stack,
        unique,
        tmp_path / "worker",
        SUBSCRIPTION_REGISTRY_TOPIC=registry_topic,
        COSMOS_DATABASE=hub_settings.cosmos_database,
    )
    hub = await MessageHub.open(hub_settings)
    try:
        with (
            spark_cluster(tmp_path / "spark") as cluster,
            worker(env, tmp_path / "worker.log", CAPABILITIES) as url,
        ):
            ingest = await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable,
                    "-m",
                    "app.cli.main",
                    "spark",
                    "ingest",
                    str(source),
                    "--topic",
                    topic,
                    "--master",
                    cluster.master_url,
                    "--batch",
                    "--wait",
                    "--batch-url",
                    url,
                    "--rejects",
                    str(tmp_path / "rejects.jsonl"),
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=600,
                env={
                    **os.environ,
                    "KAFKA_BOOTSTRAP": stack.bootstrap,
                    "KAFKA_BROKER_KIND": stack.broker_kind,
                    "HUBSTREAM_HOME": str(tmp_path / "driver"),
                    "SPARK_LOCAL_IP": "127.0.0.1",
                },
            )
            assert ingest.returncode == 0, ingest.stderr[-4000:]
            summary = orjson.loads(ingest.stdout)
            assert (summary["rows_read"], summary["rejected"]) == (EVENTS, INVALID)
            assert summary["produced"] == EVENTS - INVALID and summary["batch_complete"] is True
            apps = cluster.state()["completedapps"] + cluster.state()["activeapps"]
            assert any(app["name"] == "hubstream-spark-ingest" for app in apps), "the job ran on the cluster"

            expected = _topic_order(stack, metadata, topic)
            assert sorted(expected) == recipient_ids(RECIPIENTS)
            for actor, events in expected.items():
                got = [e for bundle in await _drain(hub, actor) for e in bundle]
                assert sorted(e.id for e in got) == sorted(e.id for e in events), actor  # each once
    finally:
        await hub.close()
