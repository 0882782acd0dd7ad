"""Per-writer offset rules and replay rules (Transporter "Message Guarantees" / "Message Failures").

An offset is the last commit-log offset a writer has *confirmed* (written, filtered or dropped);
-1 means nothing yet. Offsets only move after the sink confirmed, so they are never ahead of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.pipeline.model import LogEntry, Mode

__all__ = [
    "NOTHING",
    "FailedRange",
    "ReaderState",
    "WriterState",
    "compact",
    "log_resume_offset",
]

NOTHING = -1


@dataclass(frozen=True, slots=True)
class FailedRange:
    """Offsets first..last of a bulk write that failed; replayed one message at a time."""

    first: int
    last: int
    error: str
    failed_offset: int | None = None  # set when a single-message replay failed

    def to_json(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "last": self.last,
            "error": self.error,
            "failed_offset": self.failed_offset,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> FailedRange:
        failed = raw.get("failed_offset")
        return cls(
            int(raw["first"]), int(raw["last"]), str(raw["error"]), None if failed is None else int(failed)
        )


@dataclass(frozen=True, slots=True)
class WriterState:
    offset: int = NOTHING
    failed: FailedRange | None = None
    namespaces: Mapping[str, int] = field(default_factory=dict)
    paused: bool = False  # by the operator: kept across restarts until resumed

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    def confirmed(self, last_offset: int, namespaces: Iterable[tuple[str, int]] = ()) -> WriterState:
        """A bulk write (or a run of filtered messages) up to last_offset was confirmed."""
        merged = dict(self.namespaces)
        merged.update(namespaces)
        return replace(self, offset=max(self.offset, last_offset), namespaces=merged)

    def bulk_failed(self, first: int, last: int, error: str) -> WriterState:
        """The offset stays at the last committed one; the range is remembered for replay."""
        return replace(self, failed=FailedRange(first, last, error))

    def replay_range(self) -> range:
        """Offsets to replay one at a time, from the writer's next offset to the failed range's end."""
        if self.failed is None:
            return range(0)
        return range(self.next_offset, self.failed.last + 1)

    def replayed(self, offset: int, namespace: str | None = None) -> WriterState:
        state = self.confirmed(offset, [(namespace, offset)] if namespace else [])
        if state.failed is not None and offset >= state.failed.last:
            state = replace(state, failed=None)
        return state

    def replay_failed(self, offset: int, error: str) -> WriterState:
        last = self.failed.last if self.failed is not None else offset
        return replace(self, failed=FailedRange(offset, max(last, offset), error, failed_offset=offset))

    def marked(self, offset: int) -> WriterState:
        """Operator: treat everything up to `offset` as acknowledged without sending it."""
        failed = self.failed
        if failed is not None and offset >= failed.last:
            failed = None
        return replace(self, offset=offset, failed=failed)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "offset": self.offset,
            "failed": None if self.failed is None else self.failed.to_json(),
            "namespaces": dict(self.namespaces),
        }
        return {**body, "paused": True} if self.paused else body

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> WriterState:
        if not raw:
            return cls()
        failed = raw.get("failed")
        return cls(
            offset=int(raw.get("offset", NOTHING)),
            failed=None if not failed else FailedRange.from_json(failed),
            namespaces={str(k): int(v) for k, v in (raw.get("namespaces") or {}).items()},
            paused=raw.get("paused") is True,
        )


@dataclass(frozen=True, slots=True)
class ReaderState:
    """A namespace's reader phase and resume position, as of commit-log offset `log_offset`."""

    mode: Mode = Mode.COPY
    position: Mapping[str, Any] = field(default_factory=dict)
    log_offset: int = NOTHING
    seq: int = 0  # the append order (NewEntry.seq) of the entry that moved it last

    def advanced(self, entry: LogEntry) -> ReaderState:
        if entry.offset <= self.log_offset:
            return self
        position = {**self.position, **entry.position}
        return ReaderState(entry.mode, position, entry.offset, entry.seq or self.seq)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.name.lower(),
            "position": dict(self.position),
            "log_offset": self.log_offset,
            "seq": self.seq,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> ReaderState:
        if not raw:
            return cls()
        mode = Mode[str(raw["mode"]).upper()]
        return cls(mode, dict(raw.get("position") or {}), int(raw["log_offset"]), int(raw.get("seq") or 0))


def log_resume_offset(writers: Mapping[str, WriterState]) -> int:
    """Where reading the commit log resumes after a restart: the lowest writer offset + 1."""
    if not writers:
        return 0
    return min(state.next_offset for state in writers.values())


def compact(entries: Sequence[LogEntry], floor: int) -> list[LogEntry]:
    """The seed's compaction: below `floor` (the earliest writer offset) keep only each key's latest
    entry; keep everything at or above it."""
    latest: dict[str, int] = {}
    for entry in entries:
        if entry.offset < floor:
            latest[entry.key] = entry.offset
    keep = set(latest.values())
    return [e for e in entries if e.offset >= floor or e.offset in keep]
