"""Routing computed inside Spark (the executor code the job uses) equals the Python producer's: 100k ids."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from app.composite.model import CompositeTopic
from app.composite.routing import partition_for
from spark_ingest.executor import ROUTE_COLUMN, route_batches

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _group_ids(count: int) -> list[str]:
    rng = random.Random(11)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-_.:ÆØÅæøå€日本"
    ids = {f"{5790000000000 + i:013d}" for i in range(count // 2)}
    while len(ids) < count:
        ids.add("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    return sorted(ids)


@pytest.mark.parametrize(("partitions", "k"), [(12, 1), (24, 2)])
def test_spark_routes_100k_group_ids_like_the_python_producer(
    spark: SparkSession, partitions: int, k: int
) -> None:
    group_ids = _group_ids(100_000)
    frame = spark.createDataFrame(pa.table({"group_id": group_ids})).repartition(4)
    routed = frame.mapInArrow(
        lambda batches: route_batches(batches, "group_id", partitions, k),
        f"group_id string, {ROUTE_COLUMN} int",
    ).collect()
    spark_partitions = {row["group_id"]: row[ROUTE_COLUMN] for row in routed}
    assert len(spark_partitions) == len(group_ids)
    mismatches = [g for g in group_ids if spark_partitions[g] != partition_for(g, partitions, k)]
    assert mismatches == []
    assert len(set(spark_partitions.values())) == partitions


def test_composite_topic_target_agrees_with_the_spark_route(spark: SparkSession) -> None:
    topic = CompositeTopic.create("routing-check", 6).add_storage_topic(12).switch_produce()
    storage = topic.current
    group_ids = _group_ids(2_000)
    frame = spark.createDataFrame(pa.table({"group_id": group_ids}))
    routed = frame.mapInArrow(
        lambda batches: route_batches(batches, "group_id", storage.partitions, storage.k),
        f"group_id string, {ROUTE_COLUMN} int",
    ).collect()
    assert storage.k == 2
    assert all(topic.target(r["group_id"]) == (storage.name, r[ROUTE_COLUMN]) for r in routed)
