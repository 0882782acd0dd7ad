"""The commit log's Kafka records (pure): one record per run of entries of one namespace.

The log's offsets (the seed's commit ids, which writers keep) are entry numbers, not Kafka offsets:
a record holds `count` entries numbered `first` .. `first + count - 1`, and the numbers of a log
only grow, without gaps except where an append failed. A record has headers `hs-first` and
`hs-count` (and `hs-seq`, the append order of its first entry, NewEntry.seq; the entries after
it follow on), the namespace as its key (Kafka's compaction keeps each namespace's latest record: at
least one message per namespace, the seed's rule) and a JSON array of entries as its value, each
`[ts, mode, op, data, pos, doc_key]`, plus the row as it was for an update or delete.

A record without those headers is not part of the log: it takes no number and readers skip it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.errors import InvalidInput
from app.pipeline.model import LogEntry, Message, Mode, NewEntry, Op

__all__ = [
    "COUNT_HEADER",
    "FIRST_HEADER",
    "LogRecord",
    "Placed",
    "decode_record",
    "encode_records",
    "invalid_entries",
    "locate",
    "record_numbers",
    "record_seq",
]

FIRST_HEADER = "hs-first"
COUNT_HEADER = "hs-count"
SEQ_HEADER = "hs-seq"
INVALID_NAMESPACE = "__invalid__"

_OPS = {op.value: op for op in Op}
_MODES = {int(mode): mode for mode in Mode}


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record to append: entries first .. first + count - 1 of one namespace."""

    key: bytes
    value: bytes
    first: int
    count: int
    seq: int = 0  # the append order of its first entry; 0: none (an entry of an older version)

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        headers = [(FIRST_HEADER, b"%d" % self.first), (COUNT_HEADER, b"%d" % self.count)]
        if self.seq:
            headers.append((SEQ_HEADER, b"%d" % self.seq))
        return headers


def _encode(items: list[list[Any]]) -> bytes:
    try:  # the enums as they are: orjson writes their values
        return orjson.dumps(items)
    except orjson.JSONEncodeError:  # a key that is not a string: written as its string
        return orjson.dumps(items, option=orjson.OPT_NON_STR_KEYS)


def encode_records(entries: Sequence[NewEntry], first: int, max_bytes: int) -> list[LogRecord]:
    """The entries numbered from `first`, as records in order: a new record where the namespace
    changes, and a run split in halves while its value is over `max_bytes` (one entry alone is
    left to the broker to refuse)."""
    namespaces = [entry.message.namespace for entry in entries]
    records: list[LogRecord] = []
    if namespaces and namespaces.count(namespaces[0]) == len(namespaces):  # the usual batch: one run
        _encode_run(entries, 0, len(entries), first, max_bytes, records)
        return records
    start = 0
    for _, run in itertools.groupby(namespaces):
        end = start + sum(1 for _ in run)
        _encode_run(entries, start, end, first + start, max_bytes, records)
        start = end
    return records


def _encode_run(
    entries: Sequence[NewEntry], start: int, end: int, number: int, max_bytes: int, out: list[LogRecord]
) -> None:
    items = [  # one list per entry, built inline: a function call per entry costs more
        [m.timestamp_ms, e.mode, m.op, m.data, e.position, e.doc_key]
        if (m := e.message).before is None
        else [m.timestamp_ms, e.mode, m.op, m.data, e.position, e.doc_key, m.before]
        for e in entries[start:end]
    ]
    value = _encode(items)
    if len(value) > max_bytes and end - start > 1:
        middle = (start + end) // 2
        _encode_run(entries, start, middle, number, max_bytes, out)
        _encode_run(entries, middle, end, number + middle - start, max_bytes, out)
        return
    head = entries[start]
    out.append(LogRecord(head.message.namespace.encode("utf-8"), value, number, end - start, head.seq))


def record_numbers(headers: Sequence[tuple[str, bytes | None]] | None) -> tuple[int, int] | None:
    """(first, count) of a log record from its headers; None for a record that is not one."""
    first = count = None
    for name, value in headers or ():
        if name == FIRST_HEADER and value is not None:
            first = value
        elif name == COUNT_HEADER and value is not None:
            count = value
    if first is None or count is None:
        return None
    try:
        numbers = int(first), int(count)
    except ValueError:
        return None
    return numbers if numbers[0] >= 0 and numbers[1] > 0 else None


def record_seq(headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """The append order of a log record's first entry; 0 when it has none (or not a number)."""
    for name, value in headers or ():
        if name == SEQ_HEADER and value is not None:
            try:
                return max(int(value), 0)
            except ValueError:
                return 0
    return 0


def decode_record(
    key: bytes | None, first: int, count: int, value: bytes | None, seq: int = 0
) -> list[LogEntry]:
    """The record's entries (with their append order from `seq` on, when it is given); raises
    InvalidInput when its value is not `count` entries."""
    try:
        namespace = (key or b"").decode("utf-8")
        items = orjson.loads(value or b"")
        if not namespace or type(items) is not list or len(items) != count:
            raise ValueError(f"{count} entries of a namespace expected")
        entries = []
        for number, item in enumerate(items, first):
            ts, mode, op, data, position, doc_key = item[:6]
            message = Message(  # dict lookups: the enum constructors cost more per entry
                _OPS[op],
                int(ts),
                namespace,
                data if type(data) is dict else {"value": data},
                item[6] if len(item) > 6 else None,
            )
            order = seq + number - first if seq else 0
            entries.append(
                LogEntry(
                    number,
                    message.timestamp_ms,
                    _MODES[mode],
                    namespace,
                    message,
                    position or {},
                    doc_key,
                    order,
                )
            )
        return entries
    except (orjson.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"not {count} log entries from {first} ({exc})") from exc


def invalid_entries(first: int, count: int, reason: str) -> list[LogEntry]:
    """A record whose entries cannot be read becomes commands every writer acknowledges without
    writing (numbers kept: the writers' offsets move past them)."""
    message = Message(Op.COMMAND, 0, INVALID_NAMESPACE, {"invalid": reason})
    return [LogEntry(n, 0, Mode.SYNC, INVALID_NAMESPACE, message) for n in range(first, first + count)]


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a log record is: its Kafka offset, and the first entry number it holds."""

    kafka_offset: int
    first: int


def locate(number: int, low: int, high: int, probe: Callable[[int], Placed | None]) -> int:
    """The Kafka offset to read from for entries >= `number`: the last record whose first entry is
    <= `number` (it may hold `number`), else `low`. `probe(k)` gives the first log record at Kafka
    offset k or after it (offsets compacted away and records that are not log records are passed
    over), None when there is none before `high`. Binary search: about log2(high - low) probes."""
    best, lo, hi = low, low, high
    while lo < hi:
        middle = (lo + hi) // 2
        found = probe(middle)
        if found is None or found.kafka_offset >= hi or found.first > number:
            hi = middle
        else:
            best = found.kafka_offset
            lo = found.kafka_offset + 1
    return best
