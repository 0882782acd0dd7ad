"""Batch records, their table keys and their byte encodings, and the storage port.

Table layout (one RocksDB-backed Faust table, every key of a batch in the batch's partition):
  x/<batchId>              exact batch header (JSON)
  g/<batchId>/<groupUuid>  4-byte little-endian `upto` + bitfield of the group (header only once empty)
  s/<partition>            next exact-id sequence number of the partition
  e/<uuid>                 estimated batch (JSON)
  q/<batch key>/<requestId> what a call with this Idempotency-Key answered (replayed, not redone)
  w/intent                 a multi-key write under way (app.batch.atomic)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

__all__ = [
    "BatchStore",
    "BatchTable",
    "Completion",
    "EstimatedBatch",
    "ExactBatch",
    "decode_group",
    "encode_group",
    "estimated_key",
    "exact_key",
    "group_key",
    "group_prefix",
    "request_key",
    "request_prefix",
    "sequence_key",
]

EXACT_PREFIX = b"x/"
ESTIMATED_PREFIX = b"e/"


class BatchStore(Protocol):
    """One table partition: point reads and writes plus a prefix scan (keys in byte order)."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]: ...


class BatchTable(Protocol):
    """The partitioned batch table a worker serves (tables.batches.FaustBatchTable): a store per
    partition, whose changelog sends are added to `in_flight` until Kafka confirms them."""

    name: str

    def partition_store(self, partition: int, in_flight: list[Any]) -> BatchStore: ...

    def changelog_topic(self) -> str: ...


@dataclass(frozen=True)
class Completion:
    """A batch became complete; `kind` is "exact" or "estimated"."""

    kind: str
    batch_id: int | str
    user_key: str | None
    completed_at_ms: int

    def as_event(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "batchId": self.batch_id,
            "userKey": self.user_key,
            "completedAtMs": self.completed_at_ms,
        }


@dataclass(frozen=True)
class ExactBatch:
    batch_id: int
    user_key: str | None
    is_closed: bool
    pending_items: int
    total_items: int
    groups: int
    created_at_ms: int
    updated_at_ms: int
    completion_confirmed: bool = False  # the broker confirmed its completion event

    @property
    def is_complete(self) -> bool:
        return self.is_closed and self.pending_items == 0

    @property
    def completion_due(self) -> bool:
        """Complete, and no completion event confirmed yet: any ack, close or get emits it."""
        return self.is_complete and not self.completion_confirmed

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "u": self.user_key,
                "c": self.is_closed,
                "p": self.pending_items,
                "n": self.total_items,
                "g": self.groups,
                "t0": self.created_at_ms,
                "t": self.updated_at_ms,
                "cc": self.completion_confirmed,
            }
        )

    @classmethod
    def decode(cls, batch_id: int, raw: bytes) -> ExactBatch:
        d = orjson.loads(raw)
        return cls(batch_id, d["u"], d["c"], d["p"], d["n"], d["g"], d["t0"], d["t"], d.get("cc", False))


@dataclass(frozen=True)
class EstimatedBatch:
    batch_id: str
    user_key: str | None
    is_closed: bool
    pending: int
    created_at_ms: int
    updated_at_ms: int
    completion_reported: bool = False  # the broker confirmed its completion event; never again

    @property
    def is_complete(self) -> bool:
        return self.is_closed and self.pending <= 0

    @property
    def completion_due(self) -> bool:
        return self.is_complete and not self.completion_reported

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "u": self.user_key,
                "c": self.is_closed,
                "p": self.pending,
                "t0": self.created_at_ms,
                "t": self.updated_at_ms,
                "r": self.completion_reported,
            }
        )

    @classmethod
    def decode(cls, batch_id: str, raw: bytes) -> EstimatedBatch:
        d = orjson.loads(raw)
        return cls(batch_id, d["u"], d["c"], d["p"], d["t0"], d["t"], d.get("r", False))


def exact_key(batch_id: int) -> bytes:
    return b"x/%d" % batch_id


def group_prefix(batch_id: int) -> bytes:
    return b"g/%d/" % batch_id


def group_key(batch_id: int, group_id: str) -> bytes:
    return b"g/%d/%s" % (batch_id, group_id.encode())


def request_prefix(batch_key: bytes) -> bytes:
    """Where the answers to idempotent calls on the batch stored under `batch_key` live."""
    return b"q/" + batch_key + b"/"


def request_key(batch_key: bytes, request_id: str) -> bytes:
    return request_prefix(batch_key) + request_id.encode()


def sequence_key(partition: int) -> bytes:
    return b"s/%d" % partition


def estimated_key(batch_id: str) -> bytes:
    return ESTIMATED_PREFIX + batch_id.encode()


def encode_group(upto: int, bits: bytes | bytearray) -> bytes:
    return upto.to_bytes(4, "little") + bits


def decode_group(raw: bytes) -> tuple[int, bytearray]:
    """(upto, bitfield); an empty bitfield means every item of the group was acked."""
    return int.from_bytes(raw[:4], "little"), bytearray(raw[4:])
