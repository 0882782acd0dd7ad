"""The ingest job against the real broker: generated files -> composite topic -> read back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from app.composite.model import StorageTopic
from app.composite.routing import partition_for
from app.dataavailable import DataAvailable, deterministic_id, parse
from app.errors import InvalidInput
from app.settings import Settings
from spark_ingest.job import IngestOptions, IngestSummary, run_ingest
from spark_ingest.sample import SampleSpec, generate
from tests.integration.spark_ingest.conftest import Record, read_back

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _ingest(
    spark: SparkSession, settings: Settings, path: Path, topic: str, rejects: Path, **options: object
) -> IngestSummary:
    lines: list[str] = []
    summary = run_ingest(
        IngestOptions(path=str(path), topic=topic, rejects=rejects, **options),  # type: ignore[arg-type]
        settings=settings,
        spark=spark,
        report=lines.append,
    )
    assert any(topic in line for line in lines)
    return summary


def _expected(
    spec: SampleSpec, files: list[Path], root: Path
) -> tuple[dict[str, DataAvailable], list[tuple[str, int, str]], dict[str, tuple[str, int]]]:
    """What the job should produce, computed here from the generated rows: valid events by id, rejects,
    and each valid event's (file, row)."""
    valid: dict[str, DataAvailable] = {}
    rejects: list[tuple[str, int, str]] = []
    positions: dict[str, tuple[str, int]] = {}
    for path in files:
        table = pq.read_table(path)
        for row_index, row in enumerate(table.to_pylist()):
            identity = str(path.relative_to(root))
            event_id = deterministic_id("row", identity, str(row_index))
            try:
                event = parse({**row, "id": event_id})
            except InvalidInput as exc:
                rejects.append((str(path), row_index, str(exc)))
                continue
            valid[event_id] = event
            positions[event_id] = (identity, row_index)
    assert len(valid) + len(rejects) == spec.rows
    return valid, rejects, positions


def _check_records(records: list[Record], storage: StorageTopic, valid: dict[str, DataAvailable]) -> None:
    for record in records:
        event = parse(record.value)
        assert record.key == event.recipient
        assert record.partition == partition_for(event.recipient, storage.partitions, storage.k)
        assert event == valid[event.id]
        assert orjson.dumps(record.value) == orjson.dumps(event.to_json())


def test_parquet_ingest_produces_every_valid_row_once_routed_and_rejects_the_rest(
    spark: SparkSession, kafka: Settings, composite: StorageTopic, tmp_path: Path
) -> None:
    spec = SampleSpec(rows=4000, recipients=60, invalid=40, seed=5)
    root = tmp_path / "in"
    files = generate(spec, root, "parquet", files=2)
    valid, expected_rejects, positions = _expected(spec, files, root)
    topic = composite.name.rsplit(".", 1)[0]

    first = _ingest(spark, kafka, root, topic, tmp_path / "rejects.jsonl")

    assert (first.rows_read, first.rejected, first.produced) == (spec.rows, spec.invalid, len(valid))
    records = read_back(kafka, composite)
    assert len(records) == len(valid)
    assert {parse(r.value).id for r in records} == set(valid)
    _check_records(records, composite, valid)
    written = [orjson.loads(line) for line in (tmp_path / "rejects.jsonl").read_bytes().splitlines()]
    assert sorted((r["file"], r["row"], r["reason"]) for r in written) == sorted(expected_rejects)
    assert all(orjson.loads(r["raw"])["recipient"] for r in written)

    # Each small file is one split, so a recipient's events from one file keep file order in its partition.
    by_recipient_file: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for r in records:
        file, row = positions[parse(r.value).id]
        by_recipient_file.setdefault((r.key, file), []).append((r.offset, row))
    assert all(
        [row for _, row in sorted(pairs)] == sorted(row for _, row in pairs)
        for pairs in by_recipient_file.values()
    )
    partition_of = {parse(r.value).id: r.partition for r in records}

    second = _ingest(spark, kafka, root, topic, tmp_path / "rejects-2.jsonl")
    assert (second.produced, second.rejected) == (first.produced, first.rejected)
    again = read_back(kafka, composite)
    counts = Counter(parse(r.value).id for r in again)
    assert set(counts) == set(valid) and set(counts.values()) == {2}
    _check_records(again, composite, valid)
    assert all(partition_of[parse(r.value).id] == r.partition for r in again)
    assert (tmp_path / "rejects-2.jsonl").read_bytes() != b""


def test_csv_and_jsonl_rows_get_line_based_ids_and_typed_rejects(
    spark: SparkSession, kafka: Settings, composite: StorageTopic, tmp_path: Path
) -> None:
    topic = composite.name.rsplit(".", 1)[0]
    jsonl = tmp_path / "events.jsonl"
    lines = [
        b'{"recipient":"5790000000001","origin":"timeseries","message_type":"T","weight":10}',
        b'{"recipient":"5790000000002","origin":"masterdata","message_type":"M","weight":"10"}',
        b"not json",
        b'{"recipient":"5790000000003","origin":"aggregations","message_type":"A","weight":5,"key":"src-7"}',
        b"[1, 2]",
    ]
    jsonl.write_bytes(b"\n".join(lines) + b"\n")
    summary = _ingest(spark, kafka, jsonl, topic, tmp_path / "j.rejects")
    assert (summary.format, summary.rows_read, summary.produced, summary.rejected) == ("jsonl", 5, 2, 3)
    ids = {parse(r.value).id for r in read_back(kafka, composite)}
    assert ids == {deterministic_id("row", "events.jsonl", "0"), deterministic_id("key", "src-7")}
    rejects = {
        r["row"]: r["reason"] for r in map(orjson.loads, (tmp_path / "j.rejects").read_bytes().splitlines())
    }
    assert set(rejects) == {1, 2, 4}
    assert "wrong type" in rejects[1] and "invalid JSON" in rejects[2] and "JSON object" in rejects[4]

    csv = tmp_path / "events.csv"
    csv.write_text(
        "recipient,origin,message_type,weight,bundleable\n"
        "5790000000004,timeseries,T,100,false\n"
        "5790000000005,timeseries,T,12kB,true\n"
        "5790000000006,billing,T,100,true\n"
    )
    summary = _ingest(spark, kafka, csv, topic, tmp_path / "c.rejects")
    assert (summary.format, summary.produced, summary.rejected) == ("csv", 1, 2)
    events = {parse(r.value).id: parse(r.value) for r in read_back(kafka, composite)}
    csv_event = events[deterministic_id("row", "events.csv", "0")]
    assert (csv_event.recipient, csv_event.weight, csv_event.bundleable) == ("5790000000004", 100, False)
    reasons = [orjson.loads(r)["reason"] for r in (tmp_path / "c.rejects").read_bytes().splitlines()]
    assert any("wrong type" in r for r in reasons) and any("origin" in r for r in reasons)
