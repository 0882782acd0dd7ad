"""The `hubstream` CLI against the real broker: happy path and bad input (clear error, non-zero
exit, nothing partly written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from app.composite.store import MetadataStore
from app.settings import Settings

pytestmark = pytest.mark.integration


def hubstream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_topic_lifecycle_and_produce(
    stack: Settings, metadata: MetadataStore, unique: str, tmp_path: Path
) -> None:
    name = f"cli-{unique}"
    assert hubstream("topic", "create", name, "--partitions", "4").returncode == 0
    assert hubstream("topic", "add-storage", name, "--partitions", "8").returncode == 0
    switched = hubstream("topic", "switch", name)
    assert orjson.loads(switched.stdout)["produce_pointer"] == 1
    lines = [orjson.dumps({"group_id": f"g{i % 7}", "payload": {"n": i}}).decode() for i in range(300)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    result = hubstream("produce", name, "--file", str(tmp_path / "in.jsonl"))
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout.strip().splitlines()[-1]) == {"topic": name, "produced": 300}
    described = orjson.loads(hubstream("topic", "describe", name).stdout)
    assert [t["k"] for t in described["storage_topics"]] == [1, 2]
    assert sum(described["storage_topics"][0]["end_offsets"]) == 0
    assert sum(described["storage_topics"][1]["end_offsets"]) == 300


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"group_id": "a", "payload": 1}\n{oops\n', "invalid JSON"),
        ('{"group_id": "a", "payload": 1}\n{"group_id": "", "payload": 2}\n', "group_id must be a non-empty"),
        ('{"group_id": "' + "x" * 300 + '", "payload": 1}\n', "longer than"),
        ('["not", "an", "object"]\n', "expected an object"),
    ],
)
def test_bad_produce_file_writes_nothing(
    stack: Settings, metadata: MetadataStore, unique: str, tmp_path: Path, content: str, message: str
) -> None:
    name = f"bad-{unique}"
    metadata.create(name, 2)
    (tmp_path / "bad.jsonl").write_text(content)
    result = hubstream("produce", name, "--file", str(tmp_path / "bad.jsonl"))
    assert result.returncode == 2
    assert message in result.stderr
    assert metadata.broker.end_offsets([(f"{name}.0", p) for p in range(2)]) == [0, 0]


def test_bad_topic_commands_fail_clearly(stack: Settings, unique: str, tmp_path: Path) -> None:
    refused = hubstream("topic", "create", f"five-{unique}", "--partitions", "5")
    assert refused.returncode == 2
    assert "partition count 5 is not allowed" in refused.stderr
    assert f"five-{unique}.0" not in MetadataStore.of(stack).admin.topics()
    missing = hubstream("topic", "describe", f"missing-{unique}")
    assert missing.returncode == 1
    assert "no composite topic named" in missing.stderr
    (tmp_path / "ok.jsonl").write_text('{"group_id": "a", "payload": 1}\n')
    unknown = hubstream("produce", f"missing-{unique}", "--file", str(tmp_path / "ok.jsonl"))
    assert unknown.returncode == 1
    assert "no composite topic named" in unknown.stderr
