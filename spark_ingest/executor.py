"""Code that runs inside Spark's Python workers: validate, route and produce Arrow batches.

Spark hands each task an iterator of Arrow record batches (mapInArrow). Every batch carries
the input columns plus `_file`/`_start` (the split) and `_row` (the row index in the file
when the reader knows it). A task produces its valid rows with one confluent-kafka producer
per worker process, then flushes; any delivery error or unconfirmed message raises
DeliveryFailed, which fails the task so Spark runs it again (same ids, same item ids).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import KafkaError, Message, Producer
from pyspark import TaskContext

from app.composite.producer import SWITCH_FLUSH_S, RoutedTarget
from app.composite.routing import group_hash, route
from app.composite.store import MetadataStore
from app.crashpoints import arm, crash_point, disarm
from app.dataavailable import DataAvailable
from app.errors import HubstreamError
from app.kafka.broker import broker_of
from app.kafka.producing import ProduceFailed, produce_blocking
from spark_ingest.errors import DeliveryFailed
from spark_ingest.plan import IngestPlan, SplitKey, file_identity, item_ids_from
from spark_ingest.schema import RowSource, csv_record, validate_row

__all__ = [
    "COUNT_SCHEMA",
    "RESULT_SCHEMA",
    "ROUTE_COLUMN",
    "count_valid_batches",
    "event_json",
    "partitions_of",
    "produce_batches",
    "route_batches",
]

RESULT_SCHEMA = (
    "kind string, file string, row long, reason string, raw string, rows long, rejected long, produced long"
)
COUNT_SCHEMA = "file string, start long, rows long, valid long"
ROUTE_COLUMN = "partition"
MAX_RAW_CHARS = 2000
_SPLIT_COLUMNS = frozenset({"_file", "_start", "_row"})
_PRODUCERS: dict[tuple[tuple[str, str], ...], Producer] = {}
_STORES: dict[tuple[str, str], MetadataStore] = {}


def partitions_of(group_ids: list[str], partitions: int, k: int) -> list[int]:
    """The storage-topic partition of each group id: the one router every producer uses."""
    return [route(group_hash(g), partitions, k) for g in group_ids]


def route_batches(
    batches: Iterator[pa.RecordBatch], column: str, partitions: int, k: int
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: append the routed partition of `column` as ROUTE_COLUMN (int)."""
    for batch in batches:
        routed = pa.array(partitions_of(batch.column(column).to_pylist(), partitions, k), pa.int32())
        yield pa.RecordBatch.from_arrays([*batch.columns, routed], names=[*batch.schema.names, ROUTE_COLUMN])


@dataclass(slots=True)
class _Row:
    split: SplitKey
    source: RowSource
    record: dict[str, Any] | None  # None: the line is not a JSON object
    reason: str | None = None
    raw: str | None = None


def _rows(batches: Iterator[pa.RecordBatch], plan: IngestPlan) -> Iterator[_Row]:
    """Input rows with their split and absolute row index, in file order."""
    seen: dict[SplitKey, int] = {}
    identities: dict[str, str] = {}
    fmt = plan.input_format
    for batch in batches:
        names = batch.schema.names
        files, starts = batch.column("_file").to_pylist(), batch.column("_start").to_pylist()
        row_indexes = batch.column("_row").to_pylist() if "_row" in names else None
        # One dict per row, built by Arrow in C (a Python zip per row costs ~10% of the task).
        records = batch.select([n for n in names if n not in _SPLIT_COLUMNS]).to_pylist()
        for i, record in enumerate(records):
            split = (files[i], starts[i])
            ordinal = seen.get(split, 0)
            seen[split] = ordinal + 1
            row = row_indexes[i] if row_indexes is not None else None
            if row is None:
                row = plan.row_offset(split) + ordinal
            identity = identities.get(split[0])
            if identity is None:
                identity = identities[split[0]] = file_identity(split[0], plan.input_root)
            source = RowSource(identity, row)
            if fmt == "parquet":
                yield _Row(split, source, record)
            elif fmt == "csv":
                yield _Row(split, source, csv_record(record))
            else:
                yield _json_row(split, source, record.get("value"))


def _json_row(split: SplitKey, source: RowSource, line: str | None) -> _Row:
    try:
        parsed = orjson.loads(line or "")
    except orjson.JSONDecodeError as exc:
        return _Row(split, source, None, f"invalid JSON: {exc}", (line or "")[:MAX_RAW_CHARS])
    if not isinstance(parsed, dict):
        return _Row(
            split, source, None, "DataAvailable: expected a JSON object", (line or "")[:MAX_RAW_CHARS]
        )
    return _Row(split, source, parsed)


def _check(row: _Row) -> DataAvailable | str:
    """The valid event, or the reason the row is rejected."""
    if row.record is None:
        return row.reason or "unreadable row"
    try:
        return validate_row(row.record, row.source)
    except HubstreamError as exc:
        return str(exc)


def count_valid_batches(batches: Iterator[pa.RecordBatch], plan: IngestPlan) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the counting pass: rows and valid rows per split."""
    rows: dict[SplitKey, int] = {}
    valid: dict[SplitKey, int] = {}
    for row in _rows(batches, plan):
        rows[row.split] = rows.get(row.split, 0) + 1
        if isinstance(_check(row), DataAvailable):
            valid[row.split] = valid.get(row.split, 0) + 1
    keys = sorted(rows)
    yield pa.RecordBatch.from_pydict(
        {
            "file": [k[0] for k in keys],
            "start": [k[1] for k in keys],
            "rows": [rows[k] for k in keys],
            "valid": [valid.get(k, 0) for k in keys],
        }
    )


def _producer(config: dict[str, Any]) -> Producer:
    """One producer per Python worker process, reused by the tasks it runs (its connections stay warm)."""
    key = tuple(sorted((k, str(v)) for k, v in config.items()))
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = Producer(config)
    return producer


class _Deliveries:
    """Delivery reports of one task."""

    def __init__(self) -> None:
        self.confirmed = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.confirmed += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = f"{msg.topic()}[{msg.partition()}]: {err}"


def produce_batches(
    batches: Iterator[pa.RecordBatch], plan: IngestPlan, flush_timeout_s: float = 120.0
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the produce pass: one result row per rejected row, then one stats row."""
    _arm_first_attempt(plan.crash_at)
    producer = _producer(dict(plan.producer_config))
    deliveries = _Deliveries()
    rejects: dict[str, list[Any]] = {"file": [], "row": [], "reason": [], "raw": []}
    item_ids: dict[SplitKey, Iterator[str]] = {}
    rows = produced = 0
    started = time.monotonic()
    send = _sender(producer, plan, deliveries)
    for row in _rows(batches, plan):
        rows += 1
        checked = _check(row)
        if isinstance(checked, str):
            rejects["file"].append(row.split[0].removeprefix("file:"))
            rejects["row"].append(row.source.row)
            rejects["reason"].append(checked)
            rejects["raw"].append(row.raw if row.record is None else _raw(row.record))
            continue
        if plan.items is not None:
            ids = item_ids.get(row.split)
            if ids is None:
                ids = item_ids[row.split] = item_ids_from(plan.items, plan.item_offsets[row.split])
            checked = replace(checked, batch_item_id=next(ids))
        value = orjson.dumps(event_json(checked))
        if len(value) > plan.max_payload_bytes:
            raise DeliveryFailed(f"event {checked.id} serialises to {len(value)} bytes > MAX_PAYLOAD_BYTES")
        send(checked.recipient, value)
        produced += 1
    remaining = producer.flush(flush_timeout_s)
    if remaining or deliveries.failed or deliveries.confirmed != produced:
        raise DeliveryFailed(
            f"{plan.composite_topic}: {deliveries.failed} failed, {remaining} unconfirmed of {produced} "
            f"after {time.monotonic() - started:.1f} s; first error: {deliveries.first_error}"
        )
    n = len(rejects["file"])
    yield pa.RecordBatch.from_pydict(
        {
            "kind": ["reject"] * n + ["stats"],
            "file": [*rejects["file"], None],
            "row": [*rejects["row"], None],
            "reason": [*rejects["reason"], None],
            "raw": [*rejects["raw"], None],
            "rows": [None] * n + [rows],
            "rejected": [None] * n + [n],
            "produced": [None] * n + [produced],
        },
        schema=pa.schema(
            [
                ("kind", pa.string()),
                ("file", pa.string()),
                ("row", pa.int64()),
                ("reason", pa.string()),
                ("raw", pa.string()),
                ("rows", pa.int64()),
                ("rejected", pa.int64()),
                ("produced", pa.int64()),
            ]
        ),
    )


def _arm_first_attempt(spec: str) -> None:
    """Arm the plan's crash points in a task's first attempt only (a Python worker serves many
    tasks), so that Spark's retry of the task runs unarmed and finishes it."""
    disarm()
    context = TaskContext.get()
    if spec and (context is None or context.attemptNumber() == 0):
        arm(spec)


def _target(plan: IngestPlan, before_switch: Callable[[], None]) -> RoutedTarget:
    """The composite topic's routing as this task follows it. One metadata reader per Python
    worker, reused by its tasks; each task reads the newest definition as it starts."""
    bootstrap = str(plan.producer_config["bootstrap.servers"])
    store = _STORES.get((bootstrap, plan.metadata_topic))
    if store is None:
        store = _STORES[(bootstrap, plan.metadata_topic)] = MetadataStore(
            broker_of(plan.broker_kind, bootstrap),
            plan.metadata_topic,
            replication_factor=plan.replication_factor,
        )
    return RoutedTarget(
        store,
        plan.composite_topic,
        plan.metadata_refresh_s,
        plan.max_group_id_bytes,
        before_switch=before_switch,
    )


def _sender(producer: Producer, plan: IngestPlan, deliveries: _Deliveries) -> Callable[[str, bytes], None]:
    def confirm_before_switch() -> None:
        """The produce pointer moved: what this task sent to the older storage topic is stored
        before anything goes to the newer one (a failure fails the task, which Spark runs again)."""
        remaining = producer.flush(SWITCH_FLUSH_S)
        if remaining or deliveries.failed:
            raise DeliveryFailed(
                f"{plan.composite_topic}: at a produce-pointer switch {remaining} records were unconfirmed "
                f"and {deliveries.failed} failed; first error: {deliveries.first_error}"
            )

    target = _target(plan, confirm_before_switch).route
    pending = 0

    def send(recipient: str, value: bytes) -> None:
        nonlocal pending
        topic, partition, key = target(recipient)
        crash_point("spark.ingest.produce")  # a task killed here is run again: its events come twice
        try:
            produce_blocking(producer, topic, value, key, partition=partition, on_delivery=deliveries)
        except ProduceFailed as exc:  # e.g. the partition does not exist: metadata and topic disagree
            raise DeliveryFailed(str(exc)) from exc
        pending += 1
        if pending >= 1000:
            producer.poll(0)
            pending = 0

    return send


def event_json(event: DataAvailable) -> dict[str, Any]:
    """`event.to_json()` without asdict's deep copy (a third of the per-row cost); same keys and order."""
    data: dict[str, Any] = {
        "id": event.id,
        "recipient": event.recipient,
        "origin": event.origin,
        "message_type": event.message_type,
        "weight": event.weight,
        "bundleable": event.bundleable,
    }
    if event.batch_item_id is not None:
        data["batch_item_id"] = event.batch_item_id
    return data


def _raw(record: dict[str, Any]) -> str:
    return orjson.dumps(record, default=str).decode()[:MAX_RAW_CHARS]
