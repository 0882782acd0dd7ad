"""Writer offsets and reader states through the pipeline's control topic into its Faust table.

Faust only lets an agent change a table, so the engine (and the operator's CLI) send control
records; the pipeline agent applies them to the RocksDB-backed `offsets` table, whose changelog
makes them durable. Table keys: `writer/<name>` -> WriterState JSON, `reader/<namespace>` ->
ReaderState JSON, and `CONTROL_POSITION_KEY` -> the next control offset to apply (`ControlTable`:
the agent applies control records strictly in offset order from it, `app.kafka.in_order`). A save
returns once the control topic confirmed it; after a kill -9 the agent applies any unapplied
records before the engine starts again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Hashable, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from confluent_kafka import Producer

from app.crashpoints import crash_point
from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin
from app.kafka.broker import BrokerPort
from app.kafka.reading import read_from
from app.kafka_security import client_config
from app.pipeline.offsets import ReaderState, WriterState

CLI_GROUP = "hubstream-pipeline-cli"  # reads by the CLI and the HTTP API (never committed)

__all__ = [
    "CONTROL_POSITION_KEY",
    "ControlChannel",
    "ControlTable",
    "KafkaStateStore",
    "read_changelog",
    "read_state",
    "reader_key",
    "split_states",
    "writer_key",
]


def writer_key(name: str) -> str:
    return f"writer/{name}"


def reader_key(namespace: str) -> str:
    return f"reader/{namespace}"


CONTROL_POSITION_KEY = "position/control"


class ControlTable:
    """The control agent's position in the offsets table (an `app.kafka.in_order.PositionStore`
    over the control topic's one partition; a pipeline's process is its group's only member).
    `usable`: whether the table may be read now (recovered, no rebalance under way); a position
    read before recovery ended would be none, and the agent would start from the group's commit."""

    def __init__(self, table: MutableMapping[str, Any], usable: Callable[[], bool] = lambda: True) -> None:
        self.table = table
        self.usable = usable

    def ownership(self) -> Hashable:
        return self.usable()  # cursors are made again from the table after each recovery

    def served(self) -> Collection[int]:
        return (0,) if self.usable() else ()

    def serves(self, partition: int) -> bool:
        return partition == 0 and self.usable()

    def read(self, partition: int = 0) -> int | None:
        value = self.table.get(CONTROL_POSITION_KEY)
        return value if isinstance(value, int) else None

    def write(self, partition: int, next_offset: int) -> None:
        known = self.read(partition)
        if known is None or next_offset > known:
            self.table[CONTROL_POSITION_KEY] = next_offset


def split_states(table: Mapping[str, Any]) -> tuple[dict[str, WriterState], dict[str, ReaderState]]:
    writers = {
        k.removeprefix("writer/"): WriterState.from_json(v)
        for k, v in table.items()
        if k.startswith("writer/")
    }
    readers = {
        k.removeprefix("reader/"): ReaderState.from_json(v)
        for k, v in table.items()
        if k.startswith("reader/")
    }
    return writers, readers


def _collect(errors: list[str]) -> Callable[[Any, Any], None]:
    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    return on_delivery


class ControlChannel:
    """Producer of control records: state updates from the engine, commands from the operator.

    A refused record replaces the producer: an idempotent producer that hit a fatal error refuses
    everything after it, and every later offset flush failed until the pipeline restarted."""

    def __init__(self, bootstrap: str, topic: str, producer: Callable[[], Any] | None = None) -> None:
        self.topic = topic
        config = client_config(bootstrap, **{"enable.idempotence": True, "linger.ms": 1})
        self._new_producer = producer or (lambda: Producer(config))
        self._producer = self._new_producer()

    def send_blocking(self, records: list[dict[str, Any]], timeout_s: float = 30.0) -> None:
        errors: list[str] = []
        crash_point("pipeline.control.send")  # writer offsets, reader positions, operator commands
        for record in records:
            key = str(record.get("key") or record.get("writer") or record["kind"]).encode()
            self._producer.produce(
                self.topic,
                orjson.dumps(record),
                key,
                0,
                on_delivery=_collect(errors),
            )
        remaining = self._producer.flush(timeout_s)
        if errors:
            self._producer = self._new_producer()  # the next send starts clean; the caller retries
        if remaining or errors:
            raise ServiceUnavailable(
                f"{self.topic}[0]: control records not confirmed ({remaining} left, {errors[:1]})"
            )

    def close(self) -> None:
        self._producer.close()  # flushes what is queued, then ends the client's threads


class KafkaStateStore:
    def __init__(self, channel: ControlChannel) -> None:
        self.channel = channel
        self._sent: dict[str, Any] = {}
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pipeline-state")

    async def save(self, writers: Mapping[str, WriterState], readers: Mapping[str, ReaderState]) -> None:
        current = {writer_key(n): s.to_json() for n, s in writers.items()}
        current.update({reader_key(ns): r.to_json() for ns, r in readers.items()})
        changed = {k: v for k, v in current.items() if self._sent.get(k) != v}
        if not changed:
            return
        records = [
            {"kind": "set", "key": k, "value": v, "at_ms": int(time.time() * 1000)}
            for k, v in changed.items()
        ]
        await asyncio.get_running_loop().run_in_executor(self._executor, self.channel.send_blocking, records)
        self._sent.update(changed)

    async def close(self) -> None:
        """Stops the thread it sends on and the channel's producer (what is sent is confirmed)."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self.channel.close)
        self._executor.shutdown(wait=True)


def _table_key(raw: bytes) -> str:
    try:
        key = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")
    return key if isinstance(key, str) else raw.decode("utf-8", "replace")


def read_changelog(broker: BrokerPort, topic: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The latest value per key of a Faust table's changelog (JSON keys and values), read to its true end."""
    table: dict[str, Any] = {}
    if topic not in KafkaAdmin(broker.bootstrap).topics():
        return table
    changelog = {(topic, 0): 0}
    for msg in read_from(broker, changelog, timeout_s=timeout_s, group_id=CLI_GROUP, compacted=True):
        key = _table_key(msg.key() or b"")
        if msg.value() is None:
            table.pop(key, None)
        else:
            table[key] = orjson.loads(msg.value())
    return table


def read_state(
    broker: BrokerPort, changelog: str, control: str, group: str, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The table as the running (or next) pipeline sees it: the changelog plus the control records
    its agent has not applied yet (e.g. the final flush of a clean shutdown): those from the agent's
    position, or from the group's committed offset for a table that keeps none yet."""
    state = read_changelog(broker, changelog, timeout_s)
    position = ControlTable(state).read()
    state.pop(CONTROL_POSITION_KEY, None)
    start = (
        position
        if position is not None
        else max(KafkaAdmin(broker.bootstrap).committed(group, control, 1)[0], 0)
    )
    for msg in read_from(broker, {(control, 0): start}, timeout_s=timeout_s, group_id=CLI_GROUP):
        try:
            record = orjson.loads(msg.value() or b"null")
        except orjson.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("kind") == "set":
            state[str(record["key"])] = record["value"]
        elif record.get("kind") == "mark":
            key = writer_key(str(record["writer"]))
            state[key] = WriterState.from_json(state.get(key)).marked(int(record["offset"])).to_json()
    return state
