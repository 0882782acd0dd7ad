"""Carlyle item ids (`batchId:groupUuid:index`), their parsing, and which table partition owns a batch."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from app.batch.errors import MalformedItemId

__all__ = [
    "GroupAcks",
    "ItemGroup",
    "expand_item_ids",
    "group_item_ids",
    "item_ids_of",
    "parse_estimated_id",
    "partition_of_estimated",
    "partition_of_exact",
]

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
MAX_ITEM_ID_CHARS = 128


@dataclass(frozen=True)
class ItemGroup:
    """One response block of an add: item ids `batchId:id:index` for index < upto."""

    id: str
    upto: int


@dataclass(frozen=True)
class GroupAcks:
    """Acked indexes of one item group (duplicates allowed; clearing is idempotent)."""

    batch_id: int
    group_id: str
    indexes: tuple[int, ...]


def item_ids_of(acks: Iterable[GroupAcks]) -> list[str]:
    """The item ids `batchId:groupId:index` that `acks` name."""
    return [f"{a.batch_id}:{a.group_id}:{i}" for a in acks for i in a.indexes]


def expand_item_ids(batch_id: int, groups: Iterable[ItemGroup]) -> Iterator[str]:
    """The client-side expansion of an add response into item ids."""
    for group in groups:
        prefix = f"{batch_id}:{group.id}:"
        for index in range(group.upto):
            yield prefix + str(index)


def group_item_ids(item_ids: Iterable[object]) -> list[GroupAcks]:
    """Parse item ids and group their indexes by (batch, group); MalformedItemId names the first bad one.

    Hot path of every ack: one split per id and a dict of lists, no per-id objects.
    """
    by_group: dict[tuple[str, str], list[int]] = {}
    for item_id in item_ids:
        if not isinstance(item_id, str) or len(item_id) > MAX_ITEM_ID_CHARS:
            raise MalformedItemId(f"item id {item_id!r} is not a string of the form batchId:groupUuid:index")
        parts = item_id.split(":")
        if len(parts) != 3:
            raise MalformedItemId(f"item id {item_id!r} is not of the form batchId:groupUuid:index")
        batch, group, index = parts
        key = (batch, group)
        indexes = by_group.get(key)
        if indexes is None:
            if not (batch.isdigit() and batch.isascii()) or _UUID.match(group.lower()) is None:
                raise MalformedItemId(f"item id {item_id!r} is not of the form batchId:groupUuid:index")
            indexes = by_group[key] = []
        if not (index.isdigit() and index.isascii()):
            raise MalformedItemId(f"item id {item_id!r} has an index that is not a non-negative integer")
        indexes.append(int(index))
    merged: dict[tuple[int, str], list[int]] = {}
    for (batch, group), indexes in by_group.items():
        merged.setdefault((int(batch), group.lower()), []).extend(indexes)
    return [GroupAcks(b, g, tuple(ix)) for (b, g), ix in merged.items()]


def parse_estimated_id(value: object) -> str:
    """An estimated batch id in canonical form (lower-case UUID), or MalformedItemId naming it."""
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise MalformedItemId(f"estimated batch id {value!r} is not a UUID")


def partition_of_exact(batch_id: int, partitions: int) -> int:
    """Exact ids are allocated as `sequence * partitions + partition`, so the id names its partition."""
    return batch_id % partitions


def partition_of_estimated(batch_id: str, partitions: int) -> int:
    return uuid.UUID(batch_id).int % partitions
