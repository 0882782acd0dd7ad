"""Sinks (bulk writers): MySQL multi-row upsert, Cosmos DB upsert by id, Kafka topic, JSON-lines file.

Each `write` returns only after the target confirmed the whole batch and raises WriteFailed otherwise;
the engine advances the writer's offset only after that.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import orjson

from app.pipeline.errors import InvalidDefinition, WriteFailed
from app.pipeline.model import Message, Op
from app.settings import Settings

__all__ = ["CosmosSink", "JsonlSink", "KafkaSink", "MysqlSink", "build_sink", "message_json", "sql_literal"]

_IDENT = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
T = TypeVar("T")


def ident(name: str) -> str:
    if not _IDENT.match(name):
        raise WriteFailed(f"{name!r} is not a valid MySQL identifier")
    return f"`{name}`"


def message_json(message: Message) -> dict[str, Any]:
    return {
        "op": message.op.value,
        "namespace": message.namespace,
        "timestamp_ms": message.timestamp_ms,
        "data": message.data,
    }


_PLAIN_SQL_TYPES = (str, int, float, bool, Decimal, bytes)
# A multi-row statement is cut at this many characters (<= 1 MiB of utf-8 even at 4 bytes a char,
# far below MariaDB's max_allowed_packet).
MAX_STATEMENT_CHARS = 256 * 1024


def _sql_value(value: Any) -> Any:
    if value is None or isinstance(value, _PLAIN_SQL_TYPES):
        return value
    return orjson.dumps(value, default=str).decode()


def sql_literal(escape: Callable[[Any], str]) -> Callable[[Any], str]:
    """A value as an SQL literal through the connection's `escape` (quotes strings, hex for bytes);
    ints, None and bools directly (the hot path); values that are not plain, as their JSON text."""

    def convert(value: Any) -> str:
        kind = type(value)
        if kind is str:
            return escape(value)
        if kind is int:
            return str(value)
        if value is None:
            return "NULL"
        if kind is bool:
            return "1" if value else "0"
        if isinstance(value, _PLAIN_SQL_TYPES):
            return escape(value)
        return escape(orjson.dumps(value, default=str).decode())

    return convert


class _Threaded:
    """One worker thread per sink: blocking clients stay off the event loop."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=False)


class MysqlSink(_Threaded):
    """INSERT ... VALUES (...),(...) ON DUPLICATE KEY UPDATE in one transaction per bulk write;
    deletes by the `key` columns. Columns come from `columns` or from each message's data."""

    def __init__(self, settings: Settings, options: Mapping[str, Any]) -> None:
        super().__init__("sink-mysql")
        target = settings.mysql
        self.database = str(options.get("database") or target.database)
        self.table = f"{ident(self.database)}.{ident(str(options['table']))}"
        self.key = [str(k) for k in options.get("key", ["id"])]
        self.columns = [str(c) for c in options["columns"]] if options.get("columns") else None
        self._connect_args: dict[str, Any] = {
            "host": target.host,
            "port": target.port,
            "user": target.user,
            "password": target.password,
            "autocommit": False,
            "charset": "utf8mb4",
        }
        self._conn: Any = None

    def _connection(self) -> Any:
        import pymysql

        if self._conn is None:
            self._conn = pymysql.connect(**self._connect_args)
        else:
            self._conn.ping(reconnect=True)
        return self._conn

    def _upsert_statements(
        self, columns: Sequence[str], rows: Sequence[Mapping[str, Any]], convert: Callable[[Any], str]
    ) -> Iterator[str]:
        """INSERT ... VALUES (...),(...) ON DUPLICATE KEY UPDATE, built here (pymysql's executemany
        escapes through its generic per-value dispatch, which costs more than the database round trip)."""
        names = [ident(c) for c in columns]
        head = f"INSERT INTO {self.table} ({', '.join(names)}) VALUES "
        updates = ", ".join(
            f"{n}=VALUES({n})" for c, n in zip(columns, names, strict=True) if c not in self.key
        )
        tail = f" ON DUPLICATE KEY UPDATE {updates or f'{names[0]}={names[0]}'}"
        values: list[str] = []
        size = 0
        for data in rows:
            value = "(" + ",".join([convert(data.get(c)) for c in columns]) + ")"
            values.append(value)
            size += len(value) + 1
            if size >= MAX_STATEMENT_CHARS:
                yield head + ",".join(values) + tail
                values, size = [], 0
        if values:
            yield head + ",".join(values) + tail

    def _write_blocking(self, messages: Sequence[Message]) -> None:
        import pymysql

        try:
            conn = self._connection()
            convert = sql_literal(conn.escape)
            with conn.cursor() as cursor:
                for deleting, run in _runs(messages):
                    if deleting:
                        where = " AND ".join(f"{ident(k)}=%s" for k in self.key)
                        keys = [[_sql_value(m.data.get(k)) for k in self.key] for m in run]
                        cursor.executemany(f"DELETE FROM {self.table} WHERE {where}", keys)
                        continue
                    by_columns: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
                    fixed = tuple(self.columns) if self.columns else None
                    for m in run:
                        by_columns.setdefault(fixed or tuple(m.data), []).append(m.data)
                    for columns, rows in by_columns.items():
                        for statement in self._upsert_statements(columns, rows, convert):
                            cursor.execute(statement)
            conn.commit()
        except pymysql.MySQLError as exc:
            if self._conn is not None:
                try:
                    self._conn.rollback()
                except pymysql.MySQLError:
                    self._conn = None
            raise WriteFailed(f"MySQL {self.table}: {exc}") from exc

    async def write(self, messages: Sequence[Message]) -> None:
        await self._run(self._write_blocking, messages)

    async def close(self) -> None:
        if self._conn is not None:
            await self._run(self._conn.close)
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


class CosmosSink:
    """Idempotent upserts by id (deletes by id); up to `concurrency` requests in flight."""

    def __init__(self, settings: Settings, options: Mapping[str, Any]) -> None:
        self.settings = settings
        self.container_name = str(options["container"])
        self.partition_key = str(options.get("partition_key", "/id"))
        if not self.partition_key.startswith("/") or "/" in self.partition_key[1:]:
            raise InvalidDefinition(f"partition_key {self.partition_key!r}: use a top-level path like /id")
        self.database = options.get("database")
        self.id_field = str(options.get("id_field", "id"))
        self.concurrency = int(options.get("concurrency", 32))
        self._store: Any = None
        self._container: Any = None

    async def _target(self) -> Any:
        if self._container is None:
            from app.cosmos.client import open_cosmos

            self._store = await open_cosmos(self.settings, self.database)
            self._container = await self._store.container(self.container_name, self.partition_key)
        return self._container

    async def write(self, messages: Sequence[Message]) -> None:
        from azure.cosmos.exceptions import CosmosHttpResponseError, CosmosResourceNotFoundError

        container = await self._target()
        gate = asyncio.Semaphore(self.concurrency)
        latest: dict[str, Message] = {}
        for m in messages:  # the last change of a document in a batch wins
            if self.id_field not in m.data:
                raise WriteFailed(
                    f"Cosmos {self.container_name}: message without {self.id_field!r}: {dict(m.data)}"
                )
            latest[str(m.data[self.id_field])] = m

        async def one(doc_id: str, m: Message) -> None:
            async with gate:
                doc = {**m.data, "id": doc_id}
                if m.op is Op.DELETE:
                    try:
                        await container.delete_item(doc_id, partition_key=doc.get(self.partition_key[1:]))
                    except CosmosResourceNotFoundError:
                        return
                else:
                    await container.upsert_item(doc)

        results = await asyncio.gather(*(one(i, m) for i, m in latest.items()), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            first = failures[0]
            if not isinstance(first, CosmosHttpResponseError | OSError | WriteFailed):
                raise first
            raise WriteFailed(
                f"Cosmos {self.container_name}: {len(failures)} of {len(latest)} failed: {first}"
            )

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()


class KafkaSink(_Threaded):
    """Produces each message's data as JSON (key: `key_field` of the data, else the namespace)."""

    def __init__(self, settings: Settings, options: Mapping[str, Any]) -> None:
        from confluent_kafka import Producer

        from app.kafka.admin import KafkaAdmin, TopicSpec

        super().__init__("sink-kafka")
        self.topic = str(options["topic"])
        self.key_field = options.get("key_field")
        KafkaAdmin(settings.bootstrap).create([TopicSpec(self.topic, int(options.get("partitions", 1)))])
        self._producer = Producer(
            {"bootstrap.servers": settings.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )

    def _write_blocking(self, messages: Sequence[Message]) -> None:
        errors: list[str] = []
        for m in messages:
            key = m.data.get(self.key_field) if self.key_field else m.namespace
            while True:
                try:
                    self._producer.produce(
                        self.topic,
                        orjson.dumps(m.data, default=str),
                        None if key is None else str(key).encode(),
                        headers=[("op", m.op.value.encode()), ("namespace", m.namespace.encode())],
                        on_delivery=_collect(errors),
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
        remaining = self._producer.flush(60)
        if remaining or errors:
            raise WriteFailed(
                f"Kafka {self.topic}: {remaining} unconfirmed, {len(errors)} failed {errors[:1]}"
            )

    async def write(self, messages: Sequence[Message]) -> None:
        await self._run(self._write_blocking, messages)

    async def close(self) -> None:
        await self._run(self._producer.flush, 30)
        self._shutdown()


class JsonlSink(_Threaded):
    """Appends one JSON line per message and fsyncs before confirming."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__("sink-jsonl")
        self.path = Path(str(options["path"]))
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write_blocking(self, messages: Sequence[Message]) -> None:
        lines = b"".join(orjson.dumps(message_json(m), default=str) + b"\n" for m in messages)
        try:
            with open(self.path, "ab") as handle:
                handle.write(lines)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise WriteFailed(f"{self.path}: {exc}") from exc

    async def write(self, messages: Sequence[Message]) -> None:
        await self._run(self._write_blocking, messages)

    async def close(self) -> None:
        self._shutdown()


def _collect(errors: list[str]) -> Callable[[Any, Any], None]:
    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    return on_delivery


def build_sink(kind: str, settings: Settings, options: Mapping[str, Any]) -> Any:
    if kind == "mysql":
        return MysqlSink(settings, options)
    if kind == "cosmos":
        return CosmosSink(settings, options)
    if kind == "kafka":
        return KafkaSink(settings, options)
    if kind == "jsonl":
        return JsonlSink(options)
    raise InvalidDefinition(f"unknown writer type {kind!r}")
