"""A writer's error tolerance (Kafka Connect's `errors.tolerance`) and its dead letters, pure values.

`none` (the default): a record that fails stops the writer, as the seed says. `all`: a record that
fails in a transform or in the sink's conversion goes to the pipeline's dead-letter topic with
`hs-*` context headers, and the writer goes on past it. A write the target refuses is not
tolerated: it stops the writer either way (one-at-a-time replay, then stop at the refused record).
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
