"""A live pipeline (JSON-lines reader -> Kafka-topic writer and JSON-lines writer) operated through the
CLI, which talks to the process's HTTP API: status, log show, offset list/show/mark, step and resume;
then a clean restart on its own datadir. Without the process, reads come from Kafka and resume fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from app.kafka.broker import broker_for
from app.settings import Settings

from .support import cli, cli_json, free_port, start, status, stop, wait

pytestmark = pytest.mark.integration

POISON = 25  # the JSON-lines writer's transform raises on this message
TRANSFORM = """
def refuse_poison(message):
    if message.data.get("poison"):
        raise ValueError(f"poison message {message.data['id']}")
    return message
"""


def _lines(first: int, last: int) -> bytes:
    rows = [
        {"id": f"d{i}", "seq": i, **({"poison": True} if i == POISON else {})} for i in range(first, last)
    ]
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def _topic_values(
    settings: Settings, topic: str
) -> list[tuple[bytes | None, dict[str, Any], dict[str, bytes]]]:
    end = broker_for(settings).end_offsets([(topic, 0)])[0]
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": f"{topic}-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes | None, dict[str, Any], dict[str, bytes]]] = []
    try:
        while len(out) < end:
            for msg in consumer.consume(100, 1.0):
                assert msg.error() is None, msg.error()
                out.append((msg.key(), orjson.loads(msg.value()), dict(msg.headers() or [])))
    finally:
        consumer.close()
    return out


def test_operator_commands_on_a_live_pipeline(stack: Settings, unique: str, tmp_path: Path) -> None:
    name, topic = f"ops-{unique}", f"pl-out-{unique}"
    source, target = tmp_path / "in.jsonl", tmp_path / "out" / "file.jsonl"
    source.write_bytes(_lines(0, 40) + b"not json\n")  # offsets 0-39, 40 = the bad line, 41 = copy Complete
    (tmp_path / "transforms.py").write_text(TRANSFORM)
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 10\nbatch_wait_s: 0.05\n"
        f"reader: {{type: jsonl, path: {source}, namespace: docs}}\n"
        "writers:\n"
        f"  - {{name: bus, type: kafka, topic: {topic}, key_field: id}}\n"
        f"  - {{name: file, type: jsonl, path: {target}, transforms: ['transforms.py:refuse_poison']}}\n"
    )
    port = free_port()
    proc = start(file, tmp_path, port)
    try:
        wait(lambda: cli("status", name, port=port).returncode == 0, 60, "the pipeline's commit log")
        wait(
            lambda: (
                (s := status(name, port=port))["writers"].get("bus", {}).get("offset") == 41
                and (s["writers"].get("file", {}).get("failed") or None) is not None
            ),
            60,
            "bus at the end and file stopped by the poison message",
        )
        report = status(name, port=port)
        assert report["commitLog"]["endOffset"] == 42
        assert report["reader"]["docs"]["mode"] == "complete"
        assert report["writers"]["bus"]["lag"] == 0 and not report["writers"]["bus"]["stopped"]
        failed = report["writers"]["file"]["failed"]
        assert failed["first"] <= POISON <= failed["last"]
        assert report["writers"]["file"]["offset"] == failed["first"] - 1  # stopped at its last commit
        assert report["writers"]["file"]["stopped"] and report["writers"]["file"]["lag"] > 0

        entries = [
            orjson.loads(line)
            for line in cli("log", "show", name, "--from", "24", "--to", "26", port=port).stdout.splitlines()
        ]
        assert [e["offset"] for e in entries] == [24, 25, 26]
        assert entries[1]["value"]["data"] == {"id": f"d{POISON}", "seq": POISON, "poison": True}
        assert entries[1]["key"] == "docs" and entries[1]["mode"] == "copy"
        assert cli_json("offset", "list", name, port=port) == {"bus": 41, "file": failed["first"] - 1}

        # resume: the failed range again ONE at a time; the poison stops it at the last good offset.
        assert cli_json("resume", name, port=port) == {"pipeline": name, "resumed": ["file"]}
        wait(
            lambda: status(name, port=port)["writers"]["file"]["offset"] == POISON - 1,
            30,
            "replay up to the poison",
        )
        shown = cli_json("offset", "show", f"{name}/file", port=port)
        assert shown["failed"]["failedOffset"] == POISON and "poison message" in shown["failed"]["error"]

        bad = cli("offset", "mark", f"{name}/file", "999", port=port)
        assert bad.returncode == 2 and b"outside" in bad.stderr
        assert cli("offset", "show", name, port=port).returncode == 2  # NAME/WRITER expected

        # mark the poison acknowledged without sending it, step one message, resume the rest.
        cli_json("offset", "mark", f"{name}/file", str(POISON), port=port)
        wait(lambda: status(name, port=port)["writers"]["file"]["offset"] == POISON, 30, "the mark")
        stepped = cli_json("step", f"{name}/file", port=port)
        assert (stepped["stepped"], stepped["ok"], stepped["offset"]) == (POISON + 1, True, POISON + 1)
        cli_json("resume", name, "--writer", "file", port=port)
        wait(
            lambda: cli_json("offset", "list", name, port=port) == {"bus": 41, "file": 41},
            30,
            "file at the end",
        )
        assert status(name, port=port)["writers"]["file"]["failed"] is None
        assert stop(proc) == 0
        refused = cli("resume", name, port=port)  # no process to resume writers in
        assert refused.returncode == 1 and b"no pipeline process answers" in refused.stderr
        # reads still work from Kafka
        assert cli_json("offset", "list", name, port=port) == {"bus": 41, "file": 41}

        written = [orjson.loads(line) for line in target.read_bytes().splitlines()]
        assert [w["data"]["seq"] for w in written] == [i for i in range(40) if i != POISON]
        assert {(w["op"], w["namespace"]) for w in written} == {("insert", "docs")}
        produced = _topic_values(stack, topic)
        assert [(k, v["seq"]) for k, v, _ in produced] == [(f"d{i}".encode(), i) for i in range(40)]
        assert all(h == {"op": b"insert", "namespace": b"docs"} for _, _, h in produced)

        # A clean restart on its own datadir: the finished copy is not redone, new lines come once.
        datadir = tmp_path / "data" / f"worker-{port}"
        assert any(datadir.rglob("*")), "the first run left its RocksDB datadir"
        with source.open("ab") as handle:
            handle.write(_lines(40, 45))
        proc = start(file, tmp_path, port)
        wait(
            lambda: cli_json("offset", "list", name, port=port) == {"bus": 46, "file": 46},
            60,
            "the new lines",
        )
        assert proc.poll() is None, "the restarted pipeline must stay up"
        assert stop(proc) == 0
    finally:
        stop(proc)
    written = [orjson.loads(line)["data"]["seq"] for line in target.read_bytes().splitlines()]
    assert written == [i for i in range(45) if i != POISON]
    assert [v["seq"] for _, v, _ in _topic_values(stack, topic)] == list(range(45))
