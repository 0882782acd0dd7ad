"""Messages and commit-log entries (the Transporter design), pure values with their JSON encoding."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from app.errors import InvalidInput

__all__ = [
    "LogEntry",
    "Message",
    "Mode",
    "NewEntry",
    "Op",
    "decode_entry",
    "encode_entry",
    "entry_text",
]


class Op(enum.StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    COMMAND = "command"


class Mode(enum.IntEnum):
    """Per-namespace reader phase: a copy in progress, live sync, or a finished copy."""

    COPY = 0
    SYNC = 1
    COMPLETE = 2


# Message, NewEntry and LogEntry are values (never changed once built), but not frozen dataclasses: readers
# and the commit-log cursor build one of each per entry, and a frozen __init__ costs three times a plain one.


@dataclass(slots=True)
class Message:
    op: Op
    timestamp_ms: int
    namespace: str
    data: Mapping[str, Any]
    before: Mapping[str, Any] | None = None  # an update's or delete's row as it was (change capture)

    def with_data(self, data: Mapping[str, Any]) -> Message:
        return replace(self, data=data)


@dataclass(slots=True)
class NewEntry:
    """What a reader hands to the commit log: the message, its phase and the reader's position."""

    message: Message
    mode: Mode
    position: Mapping[str, Any] = field(default_factory=dict)
    doc_key: str = ""
    # The entry's place in the pipeline's append order (1, 2, ...), set by the runtime as it appends:
    # after a restart, only entries continuing that order move a reader state on (a refused append
    # leaves a hole that later confirmed ones must not skip). 0: an entry of an older version.
    seq: int = 0


@dataclass(slots=True)
class LogEntry:
    offset: int
    timestamp_ms: int
    mode: Mode
    key: str
    value: Message
    position: Mapping[str, Any] = field(default_factory=dict)
    doc_key: str = ""  # the document's key, where the reader knows one
    seq: int = 0  # NewEntry.seq

    @property
    def is_command(self) -> bool:
        return self.value.op is Op.COMMAND

    def kafka_key(self) -> bytes:
        """The Kafka key of a record about this entry (a dead letter): namespace, NUL, document key."""
        return (f"{self.key}\x00{self.doc_key}" if self.doc_key else self.key).encode("utf-8")


_OPS = {op.value: op for op in Op}
_MODES = {int(mode): mode for mode in Mode}


def encode_entry(entry: NewEntry) -> bytes:
    msg = entry.message
    # The enums as they are: orjson writes their values (reading `.value` costs more per entry).
    record: dict[str, Any] = {
        "ts": msg.timestamp_ms,
        "mode": entry.mode,
        "op": msg.op,
        "ns": msg.namespace,
        "data": msg.data,
        "pos": entry.position,
    }
    if entry.seq:
        record["seq"] = entry.seq
    if msg.before is not None:
        record["before"] = msg.before
    try:
        return orjson.dumps(record)
    except orjson.JSONEncodeError:  # a key that is not a string: written as its string
        return orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)


def decode_entry(offset: int, value: bytes | None) -> LogEntry:
    """Decode a commit-log record; raises InvalidInput on anything that is not an entry."""
    try:
        raw = orjson.loads(value or b"")
        data = raw["data"]
        message = Message(
            _OPS[raw["op"]],  # dict lookups: the enum constructors cost more per entry
            int(raw["ts"]),
            str(raw["ns"]),
            data if type(data) is dict else {"value": data},
            raw.get("before"),
        )
        mode = _MODES[raw["mode"]]
        position = raw.get("pos") or {}
        seq = int(raw.get("seq") or 0)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"commit log offset={offset}: not a log entry ({exc})") from exc
    return LogEntry(offset, message.timestamp_ms, mode, message.namespace, message, position, seq=seq)


def entry_text(entry: LogEntry, max_chars: int = 4000) -> str:
    """An entry's message as compact JSON for logs and operator reports."""
    value = entry.value
    return orjson.dumps(
        {
            "op": value.op.value,
            "namespace": value.namespace,
            "timestamp_ms": value.timestamp_ms,
            "data": value.data,
        },
        option=orjson.OPT_NON_STR_KEYS,
        default=str,
    ).decode()[:max_chars]
