"""`hubstream spark ingest|sample` end to end in-process (the session fixture's Spark is reused)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from app.cli.main import cli
from app.composite.model import StorageTopic
from app.settings import Settings
from tests.integration.spark_ingest.conftest import read_back

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_sample_then_ingest_prints_the_summary(
    spark: SparkSession, kafka: Settings, composite: StorageTopic, tmp_path: Path
) -> None:
    runner = CliRunner()
    out = tmp_path / "sample.jsonl"
    made = runner.invoke(
        cli, ["spark", "sample", str(out), "-n", "300", "-r", "20", "--invalid", "3", "--format", "jsonl"]
    )
    assert made.exit_code == 0, made.output
    topic = composite.name.rsplit(".", 1)[0]
    result = runner.invoke(
        cli, ["spark", "ingest", str(out), "--topic", topic, "--rejects", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["rows_read"], summary["produced"], summary["rejected"]) == (300, 297, 3)
    assert summary["format"] == "jsonl" and summary["rate_per_s"] > 0
    assert len((tmp_path / "r").read_bytes().splitlines()) == 3
    assert len(read_back(kafka, composite)) == 297


def test_bad_input_exits_non_zero_with_a_reason(
    spark: SparkSession, kafka: Settings, composite: StorageTopic, tmp_path: Path
) -> None:
    runner = CliRunner()
    topic = composite.name.rsplit(".", 1)[0]
    no_weight = tmp_path / "no-weight.parquet"
    pq.write_table(pa.table({"recipient": ["a"], "origin": ["timeseries"], "message_type": ["T"]}), no_weight)
    result = runner.invoke(cli, ["spark", "ingest", str(no_weight), "--topic", topic])
    assert result.exit_code == 2 and "lacks column(s) weight" in result.output
    result = runner.invoke(cli, ["spark", "ingest", str(no_weight), "--topic", f"{topic}-missing"])
    assert result.exit_code == 1 and "no composite topic" in result.output
    result = runner.invoke(cli, ["spark", "ingest", str(tmp_path / "nothing.parquet"), "--topic", topic])
    assert result.exit_code == 2 and "cannot read" in result.output
    result = runner.invoke(cli, ["spark", "ingest", str(no_weight), "--topic", topic, "--wait"])
    assert result.exit_code == 2 and "--wait needs --batch" in result.output
    assert read_back(kafka, composite) == []
