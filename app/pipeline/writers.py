"""Sinks (bulk writers): MySQL multi-row upsert, Cosmos DB upsert by id, Kafka topic, JSON-lines file.

Each `write` returns only after the target confirmed the whole batch and raises WriteFailed otherwise;
the engine advances the writer's offset only after that. The MySQL sink (app/pipeline/mysql_sink.py)
also prepares a batch's statements (`prepare`) while the connection is still confirming the previous
batch.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from azure.cosmos.exceptions import CosmosHttpResponseError, CosmosResourceNotFoundError
from confluent_kafka import Producer

from app.cosmos.client import open_cosmos
from app.crashpoints import crash_point
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.producing import ProduceFailed, produce_blocking
from app.kafka_security import client_config
from app.pipeline.errors import InvalidDefinition, WriteFailed
from app.pipeline.model import Message, Op
from app.pipeline.mysql_sink import MysqlBulk, MysqlSink
from app.pipeline.sink_thread import _Threaded
from app.settings import Settings

__all__ = [
    "CosmosSink",
    "JsonlSink",
    "KafkaSink",
    "MysqlBulk",
    "MysqlSink",
    "build_sink",
    "message_json",
]


def message_json(message: Message) -> dict[str, Any]:
    out = {
        "op": message.op.value,
        "namespace": message.namespace,
        "timestamp_ms": message.timestamp_ms,
        "data": message.data,
    }
    if message.before is not None:
        out["before"] = message.before
    return out


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
            self._store = await open_cosmos(self.settings, self.database)
            self._container = await self._store.container(self.container_name, self.partition_key)
        return self._container

    async def write(self, messages: Sequence[Message]) -> None:

        container = await self._target()
        gate = asyncio.Semaphore(self.concurrency)
        # The last change of a document in a batch wins; a document is its id in its partition.
        latest: dict[tuple[bytes, str], Message] = {}
        pk_field = self.partition_key[1:]
        for m in messages:
            if self.id_field not in m.data:
                raise WriteFailed(
                    f"Cosmos {self.container_name}: message without {self.id_field!r}: {dict(m.data)}"
                )
            doc_id = str(m.data[self.id_field])
            pk_value = doc_id if pk_field == "id" else m.data.get(pk_field)
            latest[(orjson.dumps(pk_value, default=str), doc_id)] = m

        async def one(doc_id: str, m: Message) -> None:
            async with gate:
                doc = {**m.data, "id": doc_id}
                if m.op is Op.DELETE:
                    crash_point("pipeline.writer.cosmos.delete")
                    try:
                        await container.delete_item(doc_id, partition_key=doc.get(self.partition_key[1:]))
                    except CosmosResourceNotFoundError:
                        return
                else:
                    crash_point("pipeline.writer.cosmos.upsert")
                    await container.upsert_item(doc)

        results = await asyncio.gather(*(one(i, m) for (_, i), m in latest.items()), return_exceptions=True)
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
    """Produces each message's data as JSON (key: `key_field` of the data, else the namespace); a
    delete is a tombstone (no value) under the same key, so set `key_field` to the row's key when the
    topic is compacted (a tombstone keyed by namespace would clear the namespace's other records)."""

    def __init__(self, settings: Settings, options: Mapping[str, Any]) -> None:

        super().__init__("sink-kafka")
        self.topic = str(options["topic"])
        self.key_field = options.get("key_field")
        KafkaAdmin(settings.bootstrap, settings.kafka_replication_factor).create(
            [TopicSpec(self.topic, int(options.get("partitions", 1)))]
        )
        self._producer = Producer(
            client_config(settings.bootstrap, **{"enable.idempotence": True, "linger.ms": 5})
        )

    def check(self, messages: Sequence[Message]) -> None:
        for m in messages:
            orjson.dumps(m.data, default=str)

    def _write_blocking(self, messages: Sequence[Message]) -> None:
        errors: list[str] = []
        crash_point("pipeline.writer.kafka.produce")
        for m in messages:
            key = m.data.get(self.key_field) if self.key_field else m.namespace
            try:
                produce_blocking(
                    self._producer,
                    self.topic,
                    None if m.op is Op.DELETE else orjson.dumps(m.data, default=str),
                    None if key is None else str(key).encode(),
                    headers=[("op", m.op.value.encode()), ("namespace", m.namespace.encode())],
                    on_delivery=_collect(errors),
                )
            except ProduceFailed as exc:
                raise WriteFailed(f"Kafka {self.topic}: {exc}") from exc
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

    def check(self, messages: Sequence[Message]) -> None:
        for m in messages:
            orjson.dumps(message_json(m), default=str)

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
