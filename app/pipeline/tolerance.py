"""A writer's error tolerance (Kafka Connect's `errors.tolerance`) and its dead letters, pure values.

`none` (the default): a record that fails stops the writer, as the seed says. `all`: a record that
fails in a transform or in the sink's conversion goes to the pipeline's dead-letter topic with
`hs-*` context headers, and the writer goes on past it. A write the target refuses stops the writer
(one-at-a-time replay, then stop at the refused record), unless the writer has a `retry`: then a
failed bulk is replayed one record at a time at once, each record's write tried `attempts` times
with exponential backoff, and only then does the tolerance decide (`all`: to the dead-letter
topic with stage `write`; `none`: the writer stops).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import orjson

from app.pipeline.errors import InvalidDefinition
from app.pipeline.model import LogEntry, NewEntry, encode_entry

__all__ = [
    "ERROR_MAX_CHARS",
    "DeadLetter",
    "ErrorsTolerance",
    "Failure",
    "Stage",
    "WriteRetry",
    "dead_letter",
    "dead_letter_context",
]

ERROR_MAX_CHARS = 2000  # as the subscription DLQ's hs-error


class ErrorsTolerance(enum.StrEnum):
    NONE = "none"
    ALL = "all"

    @classmethod
    def parse(cls, value: Any, where: str) -> ErrorsTolerance:
        try:
            return cls(value)
        except ValueError:
            raise InvalidDefinition(
                f"{where}: errors_tolerance must be one of {', '.join(t.value for t in cls)}, got {value!r}"
            ) from None


class Stage(enum.StrEnum):
    """Where a tolerated record failed: a step of the writer's chain, or the sink's conversion."""

    TRANSFORM = "transform"
    CONVERT = "convert"
    WRITE = "write"  # the sink refused the record's write every time the writer's retry tried it


@dataclass(frozen=True, slots=True)
class WriteRetry:
    """How often a writer tries a record's write before its tolerance decides, and the waits between
    the tries: `min_backoff_s`, doubling, at most `max_backoff_s`."""

    attempts: int = 3
    min_backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if not (self.attempts >= 1 and 0 <= self.min_backoff_s <= self.max_backoff_s):
            raise InvalidDefinition(
                f"retry: attempts >= 1 and 0 <= min_backoff_s <= max_backoff_s, got {self!r}"
            )

    def backoff_s(self, failed_attempts: int) -> float:
        """The wait after the `failed_attempts`-th failed try (1, 2, ...)."""
        return float(min(self.max_backoff_s, self.min_backoff_s * 2.0 ** (failed_attempts - 1)))


@dataclass(frozen=True, slots=True)
class Failure:
    entry: LogEntry
    stage: Stage
    step: str | None  # the chain step that raised (None for a conversion)
    error: Exception


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record for the dead-letter topic: the commit-log record's key and value, plus context."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def dead_letter(pipeline: str, writer: str, failure: Failure, failed_ms: int) -> DeadLetter:
    entry = failure.entry
    headers = [
        ("hs-pipeline", pipeline),
        ("hs-writer", writer),
        ("hs-stage", failure.stage.value),
        *([("hs-step", failure.step)] if failure.step is not None else []),
        ("hs-log-offset", str(entry.offset)),
        ("hs-source-position", orjson.dumps(entry.position, default=str).decode()),
        ("hs-error-class", type(failure.error).__name__),
        ("hs-error", str(failure.error)[:ERROR_MAX_CHARS]),
        ("hs-failed-ms", str(failed_ms)),
    ]
    value = encode_entry(NewEntry(entry.value, entry.mode, entry.position))
    return DeadLetter(entry.kafka_key(), value, tuple((k, v.encode("utf-8", "replace")) for k, v in headers))


def dead_letter_context(headers: Any) -> dict[str, str]:
    """The `hs-*` headers of a dead letter as text (for tools and tests)."""
    return {k: v.decode("utf-8", "replace") for k, v in headers or () if k.startswith("hs-")}
