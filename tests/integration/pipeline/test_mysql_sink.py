"""The MySQL sink against the real MariaDB: values written by the statements it builds come back
unchanged in both quoting modes, a lost connection is written again, and once a bulk failed the
bulk handed over after it is not written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pymysql
import pytest
import pytest_asyncio

from app.pipeline.errors import WriteFailed
from app.pipeline.model import Message, Op
from app.pipeline.writers import MysqlSink
from app.settings import Settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

Conn = pymysql.connections.Connection
# Every character MySQL escaping cares about, the sink's internal separator, and non-ASCII text.
AWKWARD = ["it's", 'say "hi"', "back\\slash", "nul\0byte", "line\nbreak\r", "ctrl\x1az", "sep\x01", "é😀", ""]


@pytest.fixture
def table(mysql: Conn, unique: str) -> Iterator[str]:
    name = f"sink_{unique}"
    with mysql.cursor() as cur:
        cur.execute(
            f"CREATE TABLE `{name}` (id VARCHAR(64) PRIMARY KEY, text VARCHAR(64), n BIGINT, "
            "flag BOOL, x DOUBLE, doc TEXT) CHARACTER SET utf8mb4"
        )
    yield name
    with mysql.cursor() as cur:
        cur.execute(f"DROP TABLE `{name}`")


@pytest_asyncio.fixture
async def sink(stack: Settings, table: str) -> AsyncIterator[MysqlSink]:
    sink = MysqlSink(stack, {"table": table, "columns": ["id", "text", "n", "flag", "x", "doc"]})
    yield sink
    await sink.close()


def upsert(data: dict[str, Any]) -> Message:
    return Message(Op.INSERT, 0, "ns", data)


def rows(mysql: Conn, table: str) -> dict[str, tuple[Any, ...]]:
    with mysql.cursor() as cur:
        cur.execute(f"SELECT id, text, n, flag, x, doc FROM `{table}`")
        return {str(r[0]): tuple(r[1:]) for r in cur.fetchall()}


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
async def test_values_come_back_unchanged(sink: MysqlSink, mysql: Conn, table: str, sql_mode: str) -> None:
    sink._connect_args["init_command"] = f"SET SESSION sql_mode='{sql_mode}'"
    messages = [
        upsert({"id": f"s{i}", "text": text, "n": i, "flag": i % 2 == 0, "x": 0.5, "doc": {"t": text}})
        for i, text in enumerate(AWKWARD)
    ]
    mixed = upsert({"id": "mixed", "text": None, "n": -(2**63), "flag": None, "x": None, "doc": None})
    await sink.write([messages[0]])  # connects: the next bulk is prepared for the server's mode
    assert sink._backslash_escapes is (sql_mode == "")
    await sink.write_prepared(await sink.prepare([*messages, mixed]))

    got = rows(mysql, table)
    for i, text in enumerate(AWKWARD):
        assert got[f"s{i}"][:4] == (text, i, int(i % 2 == 0), 0.5)
        assert orjson.loads(got[f"s{i}"][4]) == {"t": text}
    assert got["mixed"] == (None, -(2**63), None, None, None)


async def test_a_lost_connection_is_written_again(sink: MysqlSink, mysql: Conn, table: str) -> None:
    await sink.write([upsert({"id": "a", "n": 1})])
    thread = sink._conn.thread_id()
    with mysql.cursor() as cur:
        cur.execute(f"KILL {thread}")

    def gone() -> bool:
        with mysql.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", (thread,))
            return cur.fetchone() == (0,)

    wait_until(gone, 10, "the sink's connection killed")
    await sink.write([upsert({"id": "b", "n": 2})])
    assert set(rows(mysql, table)) == {"a", "b"}


async def test_the_bulk_handed_over_after_a_failed_one_is_not_written(
    stack: Settings, mysql: Conn, table: str
) -> None:
    sink = MysqlSink(stack, {"table": table})  # columns from each message's data
    try:
        await sink.write([upsert({"id": "first", "n": 1})])
        stream = object()
        # The connection's thread gets a failing bulk, then a good one before the first failed.
        bad = sink.write_prepared(await sink.prepare([upsert({"id": "bad", "missing": 1})]), stream)
        good = sink.write_prepared(await sink.prepare([upsert({"id": "later", "n": 2})]), stream)
        results = await asyncio.gather(bad, good, return_exceptions=True)
        assert all(isinstance(r, WriteFailed) for r in results), results
        assert "earlier bulk write failed" in str(results[1])
        assert set(rows(mysql, table)) == {"first"}

        # A new stream (the writer restarted) is written again.
        await sink.write_prepared(await sink.prepare([upsert({"id": "later", "n": 2})]), object())
        assert set(rows(mysql, table)) == {"first", "later"}
    finally:
        await sink.close()


async def test_versions_of_a_row_with_other_columns_are_written_in_order(
    stack: Settings, mysql: Conn, table: str
) -> None:
    """Without `columns`, rows are grouped by their set of columns; a row's versions must still be
    written in log order. Before, v1 and v3 (same columns) went into one statement and v2 after
    it, so the row ended as v2."""
    sink = MysqlSink(stack, {"table": table})
    try:
        await sink.write(
            [
                upsert({"id": "k", "text": "v1", "n": 1}),
                upsert({"id": "k", "text": "v2", "n": 2, "doc": "d2"}),
                upsert({"id": "other", "text": "o", "n": 0}),
                upsert({"id": "k", "text": "v3", "n": 3}),
            ]
        )
    finally:
        await sink.close()
    got = rows(mysql, table)
    assert got["k"][:2] == ("v3", 3), "the newest version of the row wins"
    assert got["k"][4] == "d2", "a column only an older version set keeps its value"
    assert got["other"][:2] == ("o", 0)
