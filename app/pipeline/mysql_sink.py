"""The MySQL sink: a bulk as multi-row upserts and delete runs in one transaction, its statements
prepared in their own thread while the connection is still confirming the previous bulk, and
written again once on a new connection when the server closed the old one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
import pymysql
from pymysql.constants.CR import CR_SERVER_GONE_ERROR, CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED
from pymysql.constants.SERVER_STATUS import SERVER_STATUS_NO_BACKSLASH_ESCAPES

from app.crashpoints import crash_point
from app.pipeline.errors import WriteFailed
from app.pipeline.model import Message, Op
from app.pipeline.sink_thread import _Threaded
from app.pipeline.sql import ident, row_values, upsert_statements
from app.settings import Settings

__all__ = ["MysqlBulk", "MysqlSink"]

log = logging.getLogger(__name__)

# pymysql client errors for a connection the server closed (idle timeout, restart): the bulk is
# written again once on a new connection (an upsert or delete written twice leaves the same rows).
CONNECTION_LOST = frozenset({CR_SERVER_GONE_ERROR, CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED})


_PLAIN_SQL_TYPES = (str, int, float, bool, Decimal, bytes)


def _sql_value(value: Any) -> Any:
    if value is None or isinstance(value, _PLAIN_SQL_TYPES):
        return value
    return orjson.dumps(value, default=str).decode()


@dataclass(frozen=True, slots=True)
class _Step:
    """One statement of a bulk: `sql` alone, or `sql` with %s placeholders run once per row of `rows`."""

    sql: str
    rows: list[list[Any]] | None = None


@dataclass(frozen=True, slots=True)
class MysqlBulk:
    """A batch with its statements, escaped for one quoting mode of the server (None: not built yet)."""

    messages: Sequence[Message]
    backslash_escapes: bool | None = None
    steps: tuple[_Step, ...] = ()


class MysqlSink(_Threaded):
    """INSERT ... VALUES (...),(...) ON DUPLICATE KEY UPDATE in one transaction per bulk write;
    deletes by the `key` columns. Columns come from `columns` or from each message's data.
    Statements are built in their own thread (`prepare`), the connection is used by the sink's thread."""

    def __init__(self, settings: Settings, options: Mapping[str, Any]) -> None:
        super().__init__("sink-mysql")
        self._builder = ThreadPoolExecutor(1, thread_name_prefix="sink-mysql-prepare")
        target = settings.mysql
        self.database = str(options.get("database") or target.database)
        self.table = f"{ident(self.database)}.{ident(str(options['table']))}"
        self.key = [str(k) for k in options.get("key", ["id"])]
        self.columns = [str(c) for c in options["columns"]] if options.get("columns") else None
        # autocommit: a bulk of one statement is its own transaction (one round trip)
        self._connect_args = target.connect_args(database="", autocommit=True)
        self._conn: Any = None
        self._backslash_escapes: bool | None = None  # the server's quoting mode, once connected
        self._failed_stream: object = None  # the stream of the last bulk write that failed

    def _connection(self) -> Any:
        if self._conn is None or not self._conn.open:
            self._conn = pymysql.connect(**self._connect_args)
        status = int(self._conn.server_status)
        self._backslash_escapes = not status & SERVER_STATUS_NO_BACKSLASH_ESCAPES
        return self._conn

    def _build(self, messages: Sequence[Message], backslash_escapes: bool | None) -> MysqlBulk:
        """The statements of a bulk write, in message order: consecutive deletes as one DELETE run,
        consecutive upserts as multi-row upserts per set of columns."""
        if backslash_escapes is None:
            return MysqlBulk(messages)
        steps: list[_Step] = []
        for deleting, run in _runs(messages):
            if deleting:
                steps.append(self._delete_step(run))
            else:
                steps.extend(self._upsert_steps(run, backslash_escapes))
        return MysqlBulk(messages, backslash_escapes, tuple(steps))

    def _delete_step(self, run: list[Message]) -> _Step:
        where = " AND ".join(f"{ident(k)}=%s" for k in self.key)
        keys = [[_sql_value(m.data.get(k)) for k in self.key] for m in run]
        return _Step(f"DELETE FROM {self.table} WHERE {where}", keys)

    def _upsert_steps(self, run: list[Message], backslash_escapes: bool) -> Iterator[_Step]:
        if self.columns:
            groups = [(tuple(self.columns), [m.data for m in run])]
        else:
            groups = _groups_keeping_key_order(run, self.key)
        for columns, rows in groups:
            values = row_values(columns, rows, backslash_escapes)
            for sql in upsert_statements(self.table, self.key, columns, values):
                yield _Step(sql)

    def _transaction(self, bulk: MysqlBulk) -> None:
        conn = self._connection()
        if bulk.backslash_escapes != self._backslash_escapes:  # not built yet, or the mode changed
            bulk = self._build(bulk.messages, self._backslash_escapes)
        with conn.cursor() as cursor:
            if len(bulk.steps) == 1 and bulk.steps[0].rows is None:
                crash_point("pipeline.writer.mysql.commit")
                cursor.execute(bulk.steps[0].sql)  # committed when the server answers
                return
            conn.begin()
            for step in bulk.steps:
                if step.rows is None:
                    cursor.execute(step.sql)
                else:
                    cursor.executemany(step.sql, step.rows)
            crash_point("pipeline.writer.mysql.commit")
            conn.commit()

    def _write_blocking(self, bulk: MysqlBulk) -> None:
        try:
            try:
                self._transaction(bulk)
            except pymysql.OperationalError as exc:
                if exc.args[0] not in CONNECTION_LOST:
                    raise
                log.warning("MySQL %s: connection lost (%s), writing the bulk again", self.table, exc)
                self._discard()
                self._transaction(bulk)
        except pymysql.MySQLError as exc:
            if self._conn is not None:
                try:
                    self._conn.rollback()
                except pymysql.MySQLError:
                    self._discard()
            raise WriteFailed(f"MySQL {self.table}: {exc}") from exc

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.open:
            conn.close()

    async def prepare(self, messages: Sequence[Message]) -> MysqlBulk:
        """The statements for the server's quoting mode, built in their thread (raises on a value that
        has no SQL literal, e.g. NaN). Before the first connection they are built for the default mode
        (backslash escapes on); a bulk built for the other mode is built again when written."""
        mode = True if self._backslash_escapes is None else self._backslash_escapes
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._builder, self._build, messages, mode)

    async def write_prepared(self, prepared: MysqlBulk, stream: object = None) -> None:
        """Written after the writes already made (one thread), unless one of the same stream failed."""
        await self._run(self._write_in_stream, prepared, stream)

    async def write(self, messages: Sequence[Message]) -> None:
        await self.write_prepared(MysqlBulk(messages))

    def _write_in_stream(self, bulk: MysqlBulk, stream: object) -> None:
        if stream is not None and stream is self._failed_stream:
            raise WriteFailed(f"MySQL {self.table}: not written, an earlier bulk write failed")
        try:
            self._write_blocking(bulk)
        except Exception:
            self._failed_stream = stream
            raise

    async def close(self) -> None:
        if self._conn is not None:
            await self._run(self._discard)
        self._builder.shutdown(wait=False)
        self._shutdown()


def _runs(messages: Sequence[Message]) -> list[tuple[bool, list[Message]]]:
    """Consecutive runs of deletes vs upserts, so the order of a document's changes is kept."""
    runs: list[tuple[bool, list[Message]]] = []
    for m in messages:
        deleting = m.op is Op.DELETE
        if runs and runs[-1][0] == deleting:
            runs[-1][1].append(m)
        else:
            runs.append((deleting, [m]))
    return runs


def _groups_keeping_key_order(
    run: Sequence[Message], key: Sequence[str]
) -> list[tuple[tuple[str, ...], list[Mapping[str, Any]]]]:
    """Upserts grouped by their set of columns (one multi-row statement each), in an order that
    writes every version of a row after the versions before it: a row joins the newest group of its
    columns only if no later group holds its key; otherwise it starts a new group."""
    groups: list[tuple[tuple[str, ...], list[Mapping[str, Any]]]] = []
    newest: dict[tuple[str, ...], int] = {}  # columns -> index of their newest group
    last_of_key: dict[tuple[Any, ...], int] = {}  # row key -> index of the group holding its newest version
    for message in run:
        columns = tuple(message.data)
        row_key = tuple(_sql_value(message.data.get(k)) for k in key)
        at = newest.get(columns)
        if at is None or last_of_key.get(row_key, -1) > at:
            at = newest[columns] = len(groups)
            groups.append((columns, []))
        groups[at][1].append(message.data)
        last_of_key[row_key] = at
    return groups
