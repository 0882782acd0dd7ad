"""--batch item ids (BatchTracker port, held in memory here); delivery failures fail the task and the job."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.batch.ids import ItemGroup, expand_item_ids
from app.composite.model import CompositeTopic, StorageTopic
from app.composite.store import MetadataStore
from app.dataavailable import parse
from app.kafka.admin import TopicSpec
from app.settings import Settings
from spark_ingest.batch import BatchState
from spark_ingest.errors import IngestFailed
from spark_ingest.job import IngestOptions, run_ingest
from spark_ingest.sample import SampleSpec, generate
from tests.integration.spark_ingest.conftest import read_back

pytestmark = [pytest.mark.integration, pytest.mark.spark]


class InMemoryTracker:
    """The exact-batch API's contract (Carlyle): groups of at most 64 items, closed on request."""

    def __init__(self, batch_id: str = "41") -> None:
        self.batch_id = batch_id
        self.calls: list[str] = []
        self.groups: list[tuple[str, int]] = []
        self.polls = 0

    def open(self, user_key: str) -> str:
        self.calls.append(f"open {user_key}")
        return self.batch_id

    def add_items(self, batch_id: str, items: int) -> list[tuple[str, int]]:
        self.calls.append(f"add {items}")
        rng = uuid.UUID(int=int(batch_id))  # the same groups for the same batch, so runs are comparable
        groups = [(str(uuid.uuid5(rng, str(i))), min(64, items - i)) for i in range(0, items, 64)]
        self.groups.extend(groups)
        return groups

    def close(self, batch_id: str) -> None:
        self.calls.append("close")

    def state(self, batch_id: str) -> BatchState:
        self.polls += 1
        return BatchState(batch_id, self.polls >= 2, "close" in self.calls, None)


def test_batch_assigns_one_item_id_per_event_deterministically_and_closes_after_producing(
    spark: SparkSession, kafka: Settings, metadata: MetadataStore, unique: str, tmp_path: Path
) -> None:
    spec = SampleSpec(rows=3000, recipients=40, invalid=30, seed=9)
    root = tmp_path / "in"
    generate(spec, root, "parquet", files=3)
    topic = metadata.create(f"ingest-batch-{unique}", 6)
    valid = spec.rows - spec.invalid
    item_of_run: list[dict[str, str | None]] = []
    for _ in range(2):
        tracker = InMemoryTracker()
        summary = run_ingest(
            IngestOptions(str(root), topic.name, rejects=tmp_path / "r.jsonl", batch=True, wait=True),
            settings=kafka,
            spark=spark,
            tracker=tracker,
            report=lambda _line: None,
        )
        assert (summary.produced, summary.batch_id, summary.batch_complete) == (valid, "41", True)
        assert tracker.calls == [f"open spark-ingest:{root}", f"add {valid}", "close"]
        # Offsets grow per partition, so the last record per id is this run's.
        item_of = {(e := parse(r.value)).id: e.batch_item_id for r in read_back(kafka, topic.current)}
        assert len(item_of) == valid
        assert sorted(map(str, item_of.values())) == sorted(
            expand_item_ids(41, [ItemGroup(g, n) for g, n in tracker.groups])
        )
        item_of_run.append(item_of)
    # A re-run (as a task retry would) sends every event with the same item id.
    assert item_of_run[0] == item_of_run[1]
    metadata.delete(topic.name)


def test_a_delivery_error_fails_the_task_spark_retries_it_then_the_job_fails(
    spark: SparkSession, kafka: Settings, metadata: MetadataStore, unique: str, tmp_path: Path
) -> None:
    name = f"ingest-broken-{unique}"
    metadata.admin.create([TopicSpec(f"{name}.0", 2)])
    metadata.put(CompositeTopic(name, (StorageTopic(f"{name}.0", 6, 1),)))  # claims 6, the topic has 2
    path = tmp_path / "in.parquet"
    generate(SampleSpec(rows=500, recipients=30), path, "parquet")
    tracker = InMemoryTracker()
    with pytest.raises(
        IngestFailed,
        match=r"failed task attempts\): spark_ingest.errors.DeliveryFailed: .*Unknown partition",
    ) as failure:
        run_ingest(
            IngestOptions(str(path), name, rejects=tmp_path / "r.jsonl", batch=True),
            settings=kafka,
            spark=spark,
            tracker=tracker,
            report=lambda _line: None,
        )
    attempts = int(str(failure.value).split("(", 1)[1].split(" ", 1)[0])
    assert attempts >= 2  # the first attempt failed and Spark ran the task again before giving up
    assert "close" not in tracker.calls  # a failed job leaves its batch open (the reaper expires it)
    metadata.delete(name)


def test_a_task_killed_at_a_produce_is_run_again_and_every_event_reaches_the_topic(
    spark: SparkSession, kafka: Settings, metadata: MetadataStore, unique: str, tmp_path: Path
) -> None:
    spec = SampleSpec(rows=2000, recipients=30, seed=5)
    root = tmp_path / "in"
    generate(spec, root, "parquet", files=2)
    topic = metadata.create(f"ingest-crash-{unique}", 4)
    summary = run_ingest(
        IngestOptions(
            str(root),
            topic.name,
            rejects=tmp_path / "r.jsonl",
            batch=True,
            wait=True,
            crash_at="spark.ingest.produce:300:kill",  # each task's first attempt dies at its 300th event
        ),
        settings=kafka,
        spark=spark,
        tracker=InMemoryTracker(),
        report=lambda _line: None,
    )
    assert summary.failed_tasks >= 1, "no task attempt was killed: the point is not on the produce path"
    assert (summary.produced, summary.batch_complete) == (spec.rows, True)
    item_of: dict[str, str | None] = {}
    for record in read_back(kafka, topic.current):
        event = parse(record.value)
        assert item_of.setdefault(event.id, event.batch_item_id) == event.batch_item_id, (
            "a copy sent again by the retried task carries the same batch item"
        )
    assert len(item_of) == spec.rows, "every valid event reached the topic"
    metadata.delete(topic.name)
