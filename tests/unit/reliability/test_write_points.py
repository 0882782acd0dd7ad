"""Every write to Kafka, Cosmos DB or MySQL passes a named crash point, or is listed here with why.

A function that calls a write API (produce, send, create/replace/upsert/delete item, a batch,
execute, commit, the hub's Cosmos wrappers, topic creation or deletion) or assigns to a Faust
table (`table[key] = value` writes its changelog) must call `crash_point` itself, or appear below:
its point is named by the caller or callee that is its one way in, it is not a write of data a
promise rests on, or it has no point yet (a gap, said openly, and listed in docs/reliability.md).
A new write that is none of these fails this test; so does an entry that no longer matches the code.

Within a function that calls `crash_point`, each write must be on a path through one: a point
stands beside the write (before or after it) in the write's block or in a block around it, or is
an `if` whose every branch passes one. A write on a branch that passes none fails.
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
    # the hub's Cosmos wrappers (app/hub/cosmos_io.py) and the Kafka admin's topic changes
    "create_tagged",
    "replace_tagged",
    "create_all_new",
    "replace_if_match",
    "bulk_create",
    "delete_if_match",
    "delete_topics",
    "create_topics",
}

# Named by the caller or callee every call goes through.
POINT_ELSEWHERE = {
    "app/batch/atomic.py::atomically": "batch.table.intent_written, then each key's changelog write",
    "tables/batches.py::_write": "batch.table.intent_written before it, batch.table.local_applied after",
    "tables/subscriptions.py::write": "SlotStates.put passes subscription.state.write",
    "tables/subscriptions.py::delete": "SlotStates.forget passes subscription.state.forget",
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
    "app/hub/cosmos_io.py::batch_create": "hub.save.events",
    "app/hub/cosmos_io.py::create": "as above (hub.save.catalog, hub.peek.catalog_added)",
    "app/hub/cosmos_io.py::replace_if_match": "as above (hub.save.index)",
    "app/hub/ledgers.py::write": (
        "its callers pass hub.save.claim, hub.save.renew and hub.save.release; a reaping or abandoning"
        " write is a compare-and-swap repeat of a claim's expiry (cut there, the lease runs out)"
    ),
    "app/kafka/admin.py::delete": "MetadataStore.delete passes composite.delete.topics before it",
    "app/pipeline/service.py::apply": (
        "the control agent passes pipeline.control.command_delivered before and"
        " pipeline.control.position_write after each record's effect"
    ),
    "app/pipeline/state.py::write": "the control agent passes pipeline.control.position_write before it",
    "app/pipeline/writer_runs.py::_write_from_offset": "hands bulks to the writers (pipeline.writer.*)",
    "app/pipeline/writer_runs.py::_write_bulk": "as above",
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
    "app/cli/topic.py::produce": (
        "operator CLI: produces the records a person gives it and reports how many the broker"
        " confirmed; running it again after a cut produces them again (no promise of once)"
    ),
    "app/cli/topic.py::body": "as above",
    "app/consumer/heartbeats.py::_heartbeat_loop": "a library consumer's heartbeat: members and throttle",
    "app/consumer/kafka.py::_leave": "the heartbeat's tombstone when a copy stops cleanly",
    "app/consumer/eager.py::start": "a coroutine's send: runs a handler call, writes nothing",
    "app/consumer/eager.py::resume": "as above",
    "app/hub/memory.py::create": "the in-memory fake behind the hub's Cosmos port (unit tests)",
    "app/hub/memory.py::replace_if_match": "as above",
    "app/kafka/admin.py::create": "topic creation at start-up or by an operator; topics that exist are kept",
    "app/pipeline/state.py::read_changelog": "a local dict of the changelog as read, not a Faust table",
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


def _is_point_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "crash_point"


def _passes_a_point(statement: ast.stmt) -> bool:
    """`crash_point(...)` as a statement, or an `if` whose every branch passes one."""
    if isinstance(statement, ast.If):
        return any(map(_passes_a_point, statement.body)) and any(map(_passes_a_point, statement.orelse))
    return isinstance(statement, ast.Expr) and _is_point_call(statement.value)


def _is_write(node: ast.AST) -> bool:
    """A call of a write API, or `table[key] = value` / `del table[key]` on something named like a
    table."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr in WRITES
    targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else []
    return any(isinstance(t, ast.Subscript) and "table" in ast.unparse(t.value).lower() for t in targets)


def writes_off_the_points(source: str) -> list[str]:
    """`function:line` of each write that no crash point stands beside, in functions that call one."""
    tree = ast.parse(source)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    found = []
    writes = [n for n in ast.walk(tree) if isinstance(n, ast.Call | ast.Assign | ast.Delete) and _is_write(n)]
    for write in writes:
        node: ast.AST = write
        function, guarded = None, False
        while node in parent and function is None:
            above = parent[node]
            for block in (getattr(above, f, None) for f in ("body", "orelse", "finalbody", "handlers")):
                if isinstance(block, list) and node in block and any(map(_passes_a_point, block)):
                    guarded = True
            node, function = above, above if isinstance(above, functions) else None
        calls_points = function is not None and any(map(_is_point_call, ast.walk(function)))
        if calls_points and not guarded:
            found.append(f"{getattr(function, 'name', 'lambda')}:{write.lineno}")
    return found


def unguarded_writes() -> set[str]:
    found: set[str] = set()
    for folder in ("app", "agents", "tables", "spark_ingest"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                inside = list(ast.walk(node))
                if any(map(_is_write, inside)) and not any(map(_is_point_call, inside)):
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


def test_every_write_in_a_function_with_points_is_on_a_path_through_one() -> None:
    found = {
        f"{path.relative_to(ROOT).as_posix()}::{where}"
        for folder in ("app", "agents", "tables", "spark_ingest")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for where in writes_off_the_points(path.read_text())
    }
    assert sorted(found) == [], "writes on a branch that passes no crash point"


BRANCHES = """
async def write(container, op, doc):
    if op == "delete":
        await container.delete_item(doc)
    else:
        crash_point("x.upsert")
        await container.upsert_item(doc)

async def confirmed(out, queue, doc):
    await out.produce(doc)
    if queue == "rq":
        crash_point("x.rq")
    else:
        crash_point("x.dlq")
"""


def test_a_write_on_a_branch_without_a_point_is_found() -> None:
    """The Cosmos writer's delete branch had no point (before 1eb03ce); a point on every branch after
    the write counts."""
    assert writes_off_the_points(BRANCHES) == ["write:4"]
