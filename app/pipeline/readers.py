"""Sources: a JSON-lines file, a MySQL table (copy, then sync by polling), and
build_source for every reader type (the binlog reader lives in binlog.py, the composite-topic and
plain Kafka topic ones in composite_source.py).

Every entry carries the reader's position, so a restart resumes after the last entry in the
commit log; a namespace whose copy finished (mode Complete/Sync) is never copied again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pymysql.cursors

from app.pipeline.binlog import BinlogSource
from app.pipeline.changefeed import CosmosFeedSource
from app.pipeline.composite_source import CompositeSource, KafkaTopicSource
from app.pipeline.errors import InvalidDefinition
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState
from app.pipeline.source_kit import Threaded, copied_rows, json_value, now_ms
from app.pipeline.sql import ident
from app.settings import MysqlTarget, Settings

__all__ = [
    "CompositeSource",
    "JsonlSource",
    "KafkaTopicSource",
    "MysqlSource",
    "build_source",
]

log = logging.getLogger(__name__)


def _command(namespace: str, mode: Mode, data: Mapping[str, Any], position: Mapping[str, Any]) -> NewEntry:
    return NewEntry(Message(Op.COMMAND, now_ms(), namespace, data), mode, position)


class JsonlSource(Threaded):
    """Lines of {"op", "namespace", "data"} or plain objects (inserts). Copy to EOF, then Complete;
    with `follow: true` it keeps polling the file for appended lines (Sync)."""

    def __init__(self, options: Mapping[str, Any], batch_size: int) -> None:
        super().__init__()
        self.path = Path(str(options["path"]))
        self.namespace = str(options.get("namespace") or self.path.stem)
        self.follow = bool(options.get("follow", False))
        self.poll_s = float(options.get("poll_s", 1.0))
        self.batch_size = batch_size

    def _read_from(self, line: int) -> list[tuple[int, bytes]]:
        out = []
        with open(self.path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                if number <= line:
                    continue
                if not raw.endswith(b"\n"):
                    break  # a line still being written
                out.append((number, raw))
                if len(out) >= self.batch_size:
                    break
        return out

    def _entry(self, number: int, raw: bytes, mode: Mode) -> NewEntry | None:
        if not raw.strip():
            return None
        position = {"line": number}
        try:
            item = orjson.loads(raw)
            if not isinstance(item, dict):
                raise ValueError("not a JSON object")
            if isinstance(item.get("data"), dict):
                op, ns, data = (
                    Op(item.get("op", "insert")),
                    str(item.get("namespace") or self.namespace),
                    item["data"],
                )
            else:
                op, ns, data = Op.INSERT, self.namespace, item
        except ValueError as exc:
            log.warning("%s:%d: skipped: %s", self.path, number, exc)
            return _command(self.namespace, mode, {"invalid": f"line {number}: {exc}"}, position)
        doc_key = str(data.get("id", f"line-{number}"))
        return NewEntry(Message(op, now_ms(), ns, data), mode, position, doc_key)

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        state = resume.get(self.namespace, ReaderState())
        mode = Mode.COPY if state.mode is Mode.COPY else Mode.SYNC
        line = int(state.position.get("line", 0))
        while True:
            rows = await self._run(self._read_from, line)
            if rows:
                entries = [e for e in (self._entry(n, raw, mode) for n, raw in rows) if e is not None]
                line = rows[-1][0]
                if entries:
                    yield entries
                continue
            if mode is Mode.COPY:
                yield [_command(self.namespace, Mode.COMPLETE, {"copy": "done"}, {"line": line})]
                mode = Mode.SYNC
            if not self.follow or self.until_caught_up:
                return
            await asyncio.sleep(self.poll_s)


class MysqlSource(Threaded):
    """Per table: copy (full scan in primary-key order), a Complete marker, then, with a
    `sync_column`, sync by polling rows whose (sync_column, pk) is above the last one seen.

    Sync limits: the column must grow on every insert and update (AUTO_INCREMENT or a
    version/timestamp set by the application); deletes are not seen; a row committed later with
    a value below one already read is missed (use a per-transaction sequence to avoid that).
    """

    def __init__(self, settings: Settings, options: Mapping[str, Any], batch_size: int) -> None:
        super().__init__()
        target = settings.mysql
        self.database = str(options.get("database") or target.database)
        self.poll_s = float(options.get("poll_s", 1.0))
        self.batch_size = batch_size
        self.tables: list[dict[str, Any]] = []
        for raw in options["tables"]:
            spec = {"name": raw} if isinstance(raw, str) else dict(raw)
            if "name" not in spec:
                raise InvalidDefinition(f"reader.tables: {raw!r} needs a name")
            self.tables.append(spec)
        self._connect_args = target.connect_args(database=self.database, autocommit=True)
        self._conn: Any = None

    def namespace(self, table: str) -> str:
        return f"{self.database}.{table}"

    def _query(self, sql: str, args: list[Any]) -> list[dict[str, Any]]:

        if self._conn is None:
            self._conn = pymysql.connect(**self._connect_args, cursorclass=pymysql.cursors.DictCursor)
        else:
            self._conn.ping(reconnect=True)
        with self._conn.cursor() as cursor:
            cursor.execute(sql, args)
            return list(cursor.fetchall())

    async def _primary_key(self, spec: dict[str, Any]) -> list[str]:
        if spec.get("primary_key"):
            pk = spec["primary_key"]
            return [pk] if isinstance(pk, str) else list(pk)
        rows = await self._run(
            self._query,
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE"
            " WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s AND CONSTRAINT_NAME='PRIMARY'"
            " ORDER BY ORDINAL_POSITION",
            [self.database, spec["name"]],
        )
        if not rows:
            raise InvalidDefinition(
                f"MySQL table {self.database}.{spec['name']} has no primary key (or does not exist)"
            )
        return [r["COLUMN_NAME"] for r in rows]

    async def _copy(self, spec: dict[str, Any], state: ReaderState) -> AsyncIterator[list[NewEntry]]:

        table, ns = ident(spec["name"]), self.namespace(spec["name"])
        pk = await self._primary_key(spec)
        sync_column = spec.get("sync_column")
        sync_from = state.position.get("sync_from")
        if sync_column and "sync_from" not in state.position:
            rows = await self._run(self._query, f"SELECT MAX({ident(sync_column)}) AS m FROM {table}", [])
            sync_from = json_value(rows[0]["m"])
        last = state.position.get("pk")
        cols = ", ".join(ident(c) for c in pk)
        while True:
            where = f"WHERE ({cols}) > ({', '.join(['%s'] * len(pk))})" if last is not None else ""
            rows = await self._run(
                self._query,
                f"SELECT * FROM {table} {where} ORDER BY {cols} LIMIT {self.batch_size}",
                list(last or []),
            )
            if not rows:
                break
            entries, last = copied_rows(rows, ns, pk, {"sync_from": sync_from})
            yield entries
        done = {"copy": "done", "table": spec["name"]}
        yield [_command(ns, Mode.COMPLETE, done, {"pk": last, "sync_col": sync_from, "sync_pk": None})]

    async def _sync_once(self, spec: dict[str, Any], position: dict[str, Any]) -> list[NewEntry]:

        table, ns, column = ident(spec["name"]), self.namespace(spec["name"]), spec["sync_column"]
        pk = await self._primary_key(spec)
        order = ", ".join(ident(c) for c in [column, *pk])
        sync_col, sync_pk = position.get("sync_col"), position.get("sync_pk")
        if sync_col is None:
            where, args = f"WHERE {ident(column)} IS NOT NULL", []
        elif sync_pk is None:
            where, args = f"WHERE {ident(column)} > %s", [sync_col]
        else:
            where, args = f"WHERE ({order}) > ({', '.join(['%s'] * (1 + len(pk)))})", [sync_col, *sync_pk]
        rows = await self._run(
            self._query, f"SELECT * FROM {table} {where} ORDER BY {order} LIMIT {self.batch_size}", args
        )
        entries = []
        for row in rows:
            data = {k: json_value(v) for k, v in row.items()}
            key = [data[c] for c in pk]
            position.update(sync_col=data[column], sync_pk=key)
            entries.append(
                NewEntry(
                    Message(Op.UPDATE, now_ms(), ns, data),
                    Mode.SYNC,
                    {"sync_col": data[column], "sync_pk": key},
                    _doc_key(key),
                )
            )
        return entries

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        positions: dict[str, dict[str, Any]] = {}
        for spec in self.tables:
            ns = self.namespace(spec["name"])
            state = resume.get(ns, ReaderState())
            if state.mode is Mode.COPY:
                async for batch in self._copy(spec, state):
                    if batch[-1].mode is Mode.COMPLETE:
                        positions[ns] = dict(batch[-1].position)
                    yield batch
            else:
                positions[ns] = dict(state.position)
        syncing = [s for s in self.tables if s.get("sync_column")]
        while syncing:
            idle = True
            for spec in syncing:
                batch = await self._sync_once(spec, positions[self.namespace(spec["name"])])
                if batch:
                    idle = False
                    yield batch
            if idle:
                if self.until_caught_up:  # a round found nothing new: caught up
                    return
                await asyncio.sleep(self.poll_s)

    async def close(self) -> None:
        if self._conn is not None:
            await self._run(self._conn.close)
        await super().close()


def _doc_key(key: list[Any]) -> str:
    return "|".join(str(k) for k in key)


def build_source(
    kind: str, settings: Settings, options: Mapping[str, Any], batch_size: int, wait_s: float
) -> Any:
    source = _source(kind, settings, options, batch_size, wait_s)
    if isinstance(source, Threaded | CosmosFeedSource):
        # --exit-when-idle: a streaming reader ends once it caught up with what there was at start.
        source.until_caught_up = settings.pipeline_exit_when_idle
    return source


def _source(kind: str, settings: Settings, options: Mapping[str, Any], batch_size: int, wait_s: float) -> Any:
    if kind == "jsonl":
        return JsonlSource(options, batch_size)
    if kind == "mysql":
        return MysqlSource(settings, options, batch_size)
    if kind == "composite":
        return CompositeSource(settings, options, batch_size, wait_s)
    if kind == "kafka":
        return KafkaTopicSource(settings, options, batch_size, wait_s)
    if kind == "cosmos":
        return CosmosFeedSource(settings, options, batch_size)
    if kind == "binlog":
        target = MysqlTarget(str(options["url"])) if options.get("url") else settings.binlog_mysql
        return BinlogSource(target, options, batch_size, wait_s)
    raise InvalidDefinition(f"unknown reader type {kind!r}")
