"""Every write to Kafka, Cosmos DB or MySQL passes a named crash point, or is listed here with why.

A function that calls a write API (produce, send, create/replace/upsert/delete item, a batch,
execute, commit) must call `crash_point` itself, or appear below: its point is named by the caller
or callee that is its one way in, it is not a write of data a promise rests on, or it has no point
yet (a gap, said openly, and listed in docs/reliability.md). A new write that is none of these
fails this test; so does an entry that no longer matches the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
WRITES = {
    "create_item",
    "upsert_item",
    "replace_item",
    "delete_item",
    "patch_item",
    "execute_item_batch",
    "execute",
    "executemany",
    "commit",
    "produce",
    "send",
    "send_soon",
    "send_changelog",
    "send_and_wait",
}

# Named by the caller or callee every call goes through.
POINT_ELSEWHERE = {
    "app/batch/acks.py::send_acks": "AckProducer passes batch.acks.produce for each record",
    "app/batch/atomic.py::atomically": "batch.table.intent_written, then each key's changelog write",
    "tables/batches.py::_write": "batch.table.intent_written before it, batch.table.local_applied after",
    "tables/subscriptions.py::write": "SlotStates.put passes subscription.state.write",
    "app/kafka/producing.py::_queue": (
        "the library consumer's writers name theirs (consumer.retry.confirmed, consumer.dlq.confirmed,"
        " consumer.state.write); KafkaCommitLog.start_append passes pipeline.log.append"
    ),
    "app/kafka/producing.py::produce_blocking": (
        "its callers name their point before each record (batch.acks.produce,"
        " pipeline.writer.kafka.produce, spark.ingest.produce; the composite producer's as below)"
    ),
    "app/consumer/owner.py::ask": "its transport's send passes consumer.state.request (inspect.KafkaAsking)",
    "app/composite/producer.py::produce": (
        "the producer's callers name their point (subscription.rq.confirmed, subscription.dlq.confirmed)"
    ),
    "app/hub/cosmos_io.py::create_tagged": "the repository names hub.save.* and hub.ack.* around its calls",
    "app/hub/cosmos_io.py::replace_tagged": "as above",
    "app/hub/cosmos_io.py::delete_if_match": "as above",
    "app/hub/cosmos_io.py::delete": "as above",
    "app/hub/cosmos_io.py::_batch_create": "hub.save.events",
    "app/pipeline/engine.py::_run_writer": "hands bulks to the writers, which pass pipeline.writer.*",
    "app/pipeline/engine.py::_write_bulk": "as above",
    "app/pipeline/kafka_dlq.py::send": "bulk.DeadLettering passes pipeline.dlq.confirmed after it",
}

# Not a write that a delivery promise rests on.
NOT_DATA = {
    "app/batch/client.py::create_exact": "HTTP client of the batch API; the server's writes have points",
    "app/batch/client.py::add_items": "as above",
    "app/batch/client.py::ack": "as above",
    "app/batch/client.py::close_exact": "as above",
    "app/batch/client.py::get_exact": "as above",
    "app/batch/client.py::delete_expired": "as above",
    "app/batch/client.py::create_estimated": "as above",
    "app/batch/client.py::decr": "as above",
    "app/batch/client.py::incr": "as above",
    "app/batch/client.py::close_estimated": "as above",
    "app/batch/client.py::get_estimated": "as above",
    "app/batch/client.py::delete_estimated": "as above",
    "app/cli/topic.py::produce": "operator CLI: produces records a person typed, answered per record",
    "app/cli/topic.py::body": "as above",
    "app/consumer/kafka.py::_heartbeat_loop": "a library consumer's heartbeat: member listing and throttle",
    "app/consumer/kafka.py::_leave": "the heartbeat's tombstone when a copy stops cleanly",
    "app/consumer/eager.py::start": "a coroutine's send: runs a handler call, writes nothing",
    "app/consumer/eager.py::resume": "as above",
    "app/flow/mainjob.py::mirror_rows": "the run summary's read of the MySQL mirror (DDL and SELECT)",
    "app/flow/mainjob.py::prepare_mirror": (
        "main job set-up before any row of the run exists (DDL; rows of an earlier broker's batches"
        " deleted); a crash there is a job that did not start, and the next run does it again"
    ),
    "app/pipeline/readers.py::_query": "the MySQL reader's SELECT",
    "app/pipeline/binlog.py::_query": "the binlog reader's SELECTs (tables, keys, snapshot rows)",
    "app/pipeline/binlog.py::_begin_snapshot": "opens a read-only consistent-snapshot transaction",
    "app/pipeline/binlog.py::_end_snapshot": "ends that read-only transaction",
    "app/stack/services.py::check_binlog_server": "local stack set-up (binlog check, CREATE DATABASE)",
    "app/stack/services.py::ensure_mysql_database": "local stack set-up (CREATE DATABASE)",
}

# Writes with no named point yet: gaps, listed in docs/reliability.md (none today).
NO_POINT_YET: dict[str, str] = {}


def unguarded_writes() -> set[str]:
    found: set[str] = set()
    for folder in ("app", "agents", "tables", "spark_ingest"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                calls = [n.func for n in ast.walk(node) if isinstance(n, ast.Call)]
                methods = {f.attr for f in calls if isinstance(f, ast.Attribute)}
                names = {f.id for f in calls if isinstance(f, ast.Name)}
                if methods & WRITES and "crash_point" not in names:
                    found.add(f"{path.relative_to(ROOT).as_posix()}::{node.name}")
    return found


def test_every_write_passes_a_crash_point_or_says_why_not() -> None:
    listed = POINT_ELSEWHERE | NOT_DATA | NO_POINT_YET
    found = unguarded_writes()
    assert sorted(found - set(listed)) == [], "writes without a named crash point"
    assert sorted(set(listed) - found) == [], "listed writes that now pass a point, or are gone"


def test_the_gaps_are_listed_in_docs_reliability() -> None:
    doc = (ROOT / "docs" / "reliability.md").read_text()
    for entry in NO_POINT_YET:
        assert f"`{entry}`" in doc, f"{entry} is a gap docs/reliability.md does not list"
