"""Change capture from a MySQL/MariaDB binlog: a consistent snapshot, then the row events.

Positions (app.pipeline.binlog_rows). Every streamed entry carries
``{"binlog": [file, group_start, row]}``: the binlog file, the offset where its transaction (event
group) starts, and the row's index within the group. A stream is only ever started at a group
start (a rows event cannot be decoded without the table map before it), and rows at or below a
namespace's stored position are skipped, so a restart resumes exactly after the last entry the
commit log confirmed, per namespace.

Snapshot. All matching tables are copied in primary-key order inside one transaction started
WITH CONSISTENT SNAPSHOT, whose binlog position P is where the stream begins. A snapshot cut
short by a crash resumes after the last copied key in a new snapshot transaction, but the
stream still begins at the first snapshot's P: replaying the changes between the two snapshots
over rows copied later converges, because every row event carries the full after image (a row
deleted in between is deleted again; without the replay it would stay in the target).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pymysql
import pymysql.cursors
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from app.pipeline.binlog_rows import BinlogPosition, RowChange, json_row, resume_plan, row_entries
from app.pipeline.errors import InvalidDefinition
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState
from app.pipeline.source_kit import Threaded, copied_rows, now_ms
from app.pipeline.sql import ident
from app.settings import MysqlTarget

__all__ = [
    "BinlogPosition",
    "BinlogSource",
    "RowChange",
    "resume_plan",
    "row_entries",
]

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


def _options_regex(options: Mapping[str, Any]) -> re.Pattern[str]:
    raw = options.get("tables")
    if not isinstance(raw, str) or not raw:
        raise InvalidDefinition("reader.tables: a regex over 'database.table' names, e.g. '^shop\\.orders$'")
    try:
        return re.compile(raw)
    except re.error as exc:
        raise InvalidDefinition(f"reader.tables: bad regex {raw!r}: {exc}") from exc


class BinlogSource(Threaded):
    """Consistent snapshot, then inserts, updates (before and after images) and deletes from the binlog."""

    def __init__(
        self, target: MysqlTarget, options: Mapping[str, Any], batch_size: int, wait_s: float
    ) -> None:
        super().__init__()
        self.target = target
        self.tables = _options_regex(options)
        self.snapshot = bool(options.get("snapshot", True))
        self.batch_size = batch_size
        self.wait_s = max(wait_s, 0.05)
        # Each replica connection needs its own server id; derive a stable one from what is read.
        default_id = 1_000_000 + zlib.crc32(f"{target.redacted()} {self.tables.pattern}".encode()) % 2**30
        self.server_id = int(options.get("server_id", default_id))
        self._conn: Any = None
        self._stream: Any = None
        self._primary_keys: dict[str, tuple[str, ...]] = {}
        self._matches: dict[str, bool] = {}  # namespace -> captured (the regex, searched once)
        self._group: tuple[str, int] | None = None  # the open event group's (file, start)
        self._row = -1

    # -- plain queries --------------------------------------------------------------
    def _connection(self) -> Any:

        if self._conn is None:
            self._conn = pymysql.connect(
                **self.target.connect_args(database="", autocommit=True),
                cursorclass=pymysql.cursors.DictCursor,
            )
        else:
            self._conn.ping(reconnect=True)
        return self._conn

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._connection().cursor() as cursor:
            cursor.execute(sql, list(args))
            return list(cursor.fetchall())

    def _namespaces(self) -> list[str]:
        marks = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
        rows = self._query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES"
            f" WHERE TABLE_TYPE='BASE TABLE' AND TABLE_SCHEMA NOT IN ({marks})"
            " ORDER BY TABLE_SCHEMA, TABLE_NAME",
            SYSTEM_SCHEMAS,
        )
        names = (f"{r['TABLE_SCHEMA']}.{r['TABLE_NAME']}" for r in rows)
        return [name for name in names if self.tables.search(name)]

    def _primary_key(self, namespace: str) -> tuple[str, ...]:
        if namespace not in self._primary_keys:
            schema, _, table = namespace.partition(".")
            rows = self._query(
                "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA=%s"
                " AND TABLE_NAME=%s AND CONSTRAINT_NAME='PRIMARY' ORDER BY ORDINAL_POSITION",
                (schema, table),
            )
            if not rows:
                raise InvalidDefinition(
                    f"{namespace}: binlog capture needs a primary key (a table dropped or renamed"
                    " since these rows were written has none now: set binlog_row_metadata=FULL on"
                    " the server, and the binlog itself gives each row's key)"
                )
            self._primary_keys[namespace] = tuple(r["COLUMN_NAME"] for r in rows)
        return self._primary_keys[namespace]

    def _row_key(self, event: Any, namespace: str) -> tuple[str, ...]:
        """The primary key of a rows event's table as the binlog itself records it (the server's
        binlog_row_metadata=FULL): right for rows written before the table was altered, renamed or
        dropped, which a restart replays. Without it, the table's primary key now."""
        given = getattr(event, "primary_key", "")
        if given:
            return (given,) if isinstance(given, str) else tuple(given)
        return self._primary_key(namespace)

    def _server_position(self) -> BinlogPosition:
        rows = self._query("SHOW MASTER STATUS")
        if not rows:
            raise InvalidDefinition(f"{self.target.redacted()}: the binlog is off (log_bin=OFF)")
        return BinlogPosition(str(rows[0]["File"]), int(rows[0]["Position"]))

    # -- snapshot ---------------------------------------------------------------------
    def _begin_snapshot(self) -> BinlogPosition:
        """Open a consistent-snapshot transaction; the binlog position it corresponds to."""
        conn = self._connection()
        with conn.cursor() as cursor:
            cursor.execute("SELECT VERSION() AS v")
            mariadb = "mariadb" in str(cursor.fetchone()["v"]).lower()
            if mariadb:  # MariaDB reports the snapshot's binlog position without a global lock
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%%'")
                status = {r["Variable_name"]: r["Value"] for r in cursor.fetchall()}
                return BinlogPosition(status["Binlog_snapshot_file"], int(status["Binlog_snapshot_position"]))
            cursor.execute("FLUSH TABLES WITH READ LOCK")  # MySQL: a brief global lock
            try:
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                position = self._server_position()
            finally:
                cursor.execute("UNLOCK TABLES")
            return position

    def _end_snapshot(self) -> None:
        with self._connection().cursor() as cursor:
            cursor.execute("COMMIT")

    def _copy_chunk(self, namespace: str, after: list[Any] | None) -> list[dict[str, Any]]:
        schema, _, table = namespace.partition(".")
        pk = self._primary_key(namespace)
        cols = ", ".join(ident(c) for c in pk)
        where = f"WHERE ({cols}) > ({', '.join(['%s'] * len(pk))})" if after is not None else ""
        return self._query(
            f"SELECT * FROM {ident(schema)}.{ident(table)} {where} ORDER BY {cols} LIMIT {self.batch_size}",
            after or (),
        )

    async def _copy(
        self, namespaces: Sequence[str], resume: Mapping[str, ReaderState], start: BinlogPosition
    ) -> AsyncIterator[list[NewEntry]]:
        snapshot = await self._run(self._begin_snapshot)
        log.info("binlog snapshot of %s at %s", ", ".join(namespaces), snapshot)
        try:
            for namespace in namespaces:
                pk = await self._run(self._primary_key, namespace)
                last = resume.get(namespace, ReaderState()).position.get("pk")
                while True:
                    rows = await self._run(self._copy_chunk, namespace, last)
                    if not rows:
                        break
                    entries, last = copied_rows(rows, namespace, pk, {"binlog": start.to_json()})
                    yield entries
                done = Message(
                    Op.COMMAND, now_ms(), namespace, {"copy": "done", "snapshot": snapshot.to_json()}
                )
                yield [NewEntry(done, Mode.COMPLETE, {"binlog": start.to_json(), "pk": last})]
        finally:
            await self._run(self._end_snapshot)

    # -- stream -----------------------------------------------------------------------
    def _open_stream(self, start: BinlogPosition) -> None:
        if self._stream is not None:  # a retry after a failure: its connections go first
            with contextlib.suppress(Exception):  # a broken one may refuse to close again
                self._stream.close()
        self._stream = BinLogStreamReader(
            connection_settings={
                "host": self.target.host,
                "port": self.target.port,
                "user": self.target.user,
                "passwd": self.target.password,
            },
            server_id=self.server_id,
            blocking=True,
            resume_stream=True,
            log_file=start.file,
            log_pos=start.group_start,
            only_events=[
                WriteRowsEvent,
                UpdateRowsEvent,
                DeleteRowsEvent,
                GtidEvent,
                MariadbGtidEvent,
                QueryEvent,
                XidEvent,
                RotateEvent,
                HeartbeatLogEvent,
            ],
            slave_heartbeat=min(self.wait_s, 1.0),  # an idle stream still returns to check the batch
            enable_logging=False,
        )
        self._group = None

    def _changes(self, event: Any) -> list[RowChange]:
        """Row changes of one event; tracks event groups so each row gets its position."""
        event_start = event.packet.log_pos - event.packet.event_size  # the header's size: the whole event
        if isinstance(event, GtidEvent | MariadbGtidEvent):
            self._group, self._row = (self._stream.log_file, event_start), -1
            return []
        if isinstance(event, QueryEvent):
            query = (event.query or "").strip().upper()
            if query == "BEGIN" and self._group is None:
                self._group, self._row = (self._stream.log_file, event_start), -1
            elif query == "COMMIT" or query != "BEGIN":  # a commit, or DDL (its own group)
                self._group = None
            return []
        if isinstance(event, XidEvent):
            self._group = None
            return []
        if not isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            return []
        if self._group is None:  # rows outside any group we saw start: their event is the group
            self._group, self._row = (self._stream.log_file, event_start), -1
        namespace = f"{event.schema}.{event.table}"
        rows = event.rows  # decoded even for other tables: every row counts in the group's index
        first = self._row + 1
        self._row += len(rows)
        if not self._captured(namespace):
            return []
        file, start = self._group
        ts = int(event.timestamp) * 1000
        pk = self._row_key(event, namespace)
        position = BinlogPosition(file, start, first)
        if isinstance(event, WriteRowsEvent):
            after = [json_row(row["values"]) for row in rows]
            return [RowChange(Op.INSERT, namespace, pk, None, after, position, ts)]
        if isinstance(event, UpdateRowsEvent):
            before = [json_row(row["before_values"]) for row in rows]
            after = [json_row(row["after_values"]) for row in rows]
            return [RowChange(Op.UPDATE, namespace, pk, before, after, position, ts)]
        before = [json_row(row["values"]) for row in rows]
        return [RowChange(Op.DELETE, namespace, pk, before, None, position, ts)]

    def _captured(self, namespace: str) -> bool:
        if namespace not in self._matches:
            self._matches[namespace] = self.tables.search(namespace) is not None
        return self._matches[namespace]

    def _stream_reached(self, end: BinlogPosition) -> bool:
        """Whether the stream read every event up to `end` (its file, then its offset in it)."""
        assert self._stream is not None
        at = (str(self._stream.log_file), int(self._stream.log_pos or 0))
        return at >= (end.file, end.group_start)

    def _fetch(self, seen: dict[str, BinlogPosition]) -> list[NewEntry]:
        """Entries of up to batch_size rows, or what arrived within wait_s (heartbeats bound the wait)."""
        entries: list[NewEntry] = []
        deadline = time.monotonic() + self.wait_s
        while len(entries) < self.batch_size:
            event = self._stream.fetchone()
            if event is None:
                raise OSError("the binlog stream ended")
            entries.extend(row_entries(self._changes(event), seen))
            if time.monotonic() >= deadline:
                break
        return entries

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        namespaces = await self._run(self._namespaces)
        plan = resume_plan(namespaces, resume)
        # A first snapshot's stream starts where the binlog stood just before the snapshot began
        # (replaying a change the snapshot already holds converges); a resumed one at the first's.
        start = plan.start if plan.start is not None else await self._run(self._server_position)
        if self.snapshot and plan.to_copy:
            async for batch in self._copy(plan.to_copy, resume, start):
                yield batch
        seen = dict(plan.seen)
        # With --exit-when-idle: done once the stream reaches where the binlog stood now.
        end = await self._run(self._server_position) if self.until_caught_up else None
        await self._run(self._open_stream, start)
        while True:
            batch = await self._run(self._fetch, seen)
            if batch:
                yield batch
            if end is not None and self._stream_reached(end):
                return

    async def close(self) -> None:
        if self._stream is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._stream.close)
        if self._conn is not None:
            await self._run(self._conn.close)
        await super().close()
