"""Binlog rows as commit-log entries (pure): a row's position in the binlog, where a restarted
stream starts and what each namespace has already captured (`resume_plan`), and the entries of
a rows event's rows past their namespace's stored position (`row_entries`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState
from app.pipeline.source_kit import json_value

__all__ = [
    "BinlogPosition",
    "ResumePlan",
    "RowChange",
    "doc_key",
    "json_row",
    "resume_plan",
    "row_entries",
]


# A position is built for every captured rows event: a named tuple costs half a frozen dataclass to
# build, and positions compare in C.


class BinlogPosition(NamedTuple):
    """A row's place in the binlog; ordered as the server wrote them (binlog file names sort)."""

    file: str
    group_start: int
    row: int = -1  # -1: before the group's first row (a snapshot's position)

    def to_json(self) -> list[Any]:
        return [self.file, self.group_start, self.row]

    @classmethod
    def from_json(cls, raw: Any) -> BinlogPosition | None:
        if not isinstance(raw, list | tuple) or len(raw) != 3:
            return None
        return cls(str(raw[0]), int(raw[1]), int(raw[2]))


class RowChange(NamedTuple):
    """The rows of one rows event (one table), as the stream decoded them, values JSON-safe (`json_row`).

    Row i's images are `before[i]` and `after[i]` (an insert has no before, a delete no after), its
    position `position` with row `position.row + i`: one value per event, not per row, keeps the
    reader's cost per row (and the garbage collector's) low."""

    op: Op
    namespace: str
    primary_key: tuple[str, ...]
    before: Sequence[dict[str, Any]] | None
    after: Sequence[dict[str, Any]] | None
    position: BinlogPosition  # the first row's
    timestamp_ms: int

    @property
    def rows(self) -> int:
        images = self.after if self.after is not None else self.before
        return 0 if images is None else len(images)


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """Where the stream starts and, per namespace, the last position already in the commit log."""

    start: BinlogPosition | None  # None: no position stored; the snapshot sets one
    seen: Mapping[str, BinlogPosition]
    to_copy: tuple[str, ...]  # namespaces whose snapshot has not completed


def resume_plan(namespaces: Iterable[str], resume: Mapping[str, ReaderState]) -> ResumePlan:
    """Where the stream starts (each namespace then skips its own past): at the highest position a
    streaming namespace stored, or lower where a snapshot not finished yet began.

    Entries are confirmed in stream order, so every row before the highest stored position is in
    the commit log, whichever table it belongs to: a table with no changes since keeps an old
    position, and starting from the lowest re-read the whole binlog since the first snapshot after
    every restart (and failed once the server had purged that file)."""
    seen: dict[str, BinlogPosition] = {}
    to_copy = []
    for namespace in namespaces:
        state = resume.get(namespace, ReaderState())
        if state.mode is Mode.COPY:
            to_copy.append(namespace)
    streamed: list[BinlogPosition] = []
    copying: list[BinlogPosition] = []
    for namespace, state in resume.items():
        position = BinlogPosition.from_json(state.position.get("binlog"))
        if position is not None:
            seen[namespace] = position
            (copying if state.mode is Mode.COPY else streamed).append(position)
    start = min([*copying, *([max(streamed)] if streamed else [])], default=None)
    if start is not None:
        start = BinlogPosition(start.file, start.group_start)  # streams start at a group boundary
    return ResumePlan(start, seen, tuple(to_copy))


def doc_key(primary_key: Sequence[str], row: Mapping[str, Any]) -> str:
    if len(primary_key) == 1:
        return str(row.get(primary_key[0]))
    return "|".join(str(row.get(column)) for column in primary_key)


_PLAIN = frozenset({str, int, float, bool, type(None)})


def json_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its values made JSON-safe, in place: most values need no conversion."""
    for column, value in row.items():
        if type(value) not in _PLAIN:
            row[column] = json_value(value)
    return row


def _first_new_row(change: RowChange, last: BinlogPosition | None) -> int:
    """Index of the change's first row past `last`, the namespace's stored position."""
    if last is None:
        return 0
    group, last_group = change.position[:2], last[:2]
    if last_group < group:
        return 0
    if last_group > group:
        return change.rows
    return max(0, last.row - change.position.row + 1)


def row_entries(changes: Iterable[RowChange], seen: dict[str, BinlogPosition]) -> list[NewEntry]:
    """Entries for the rows past each namespace's stored position (and moves those positions)."""
    entries = []
    for change in changes:
        op, namespace, pk, befores, afters, position, ts = change
        count = change.rows
        skip = _first_new_row(change, seen.get(namespace))
        if skip >= count:
            continue
        file, start, first = position
        seen[namespace] = BinlogPosition(file, start, first + count - 1)
        key_images = befores if op is Op.DELETE and befores is not None else afters
        for index in range(skip, count):
            before = None if befores is None else befores[index]
            data = afters[index] if afters is not None else before
            assert data is not None and key_images is not None
            key = doc_key(pk, key_images[index])
            if op is Op.UPDATE and before is not None and (old_key := doc_key(pk, before)) != key:
                # The row's key changed: the old key's delete first, at the previous row's position
                # (a crash after it captures this row again: the delete is idempotent). Targets and
                # the commit log's compaction, both by key, would otherwise keep the old row.
                entries.append(
                    NewEntry(
                        Message(Op.DELETE, ts, namespace, before, before),
                        Mode.SYNC,
                        {"binlog": [file, start, first + index - 1]},
                        old_key,
                    )
                )
            at = {"binlog": [file, start, first + index]}
            entries.append(NewEntry(Message(op, ts, namespace, data, before), Mode.SYNC, at, key))
    return entries
