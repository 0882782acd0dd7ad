"""Errors of the pipelines capability."""

from __future__ import annotations

from app.errors import ConflictError, HubstreamError, InvalidInput, NotFound, ServiceUnavailable

__all__ = [
    "EntryTooLarge",
    "InvalidDefinition",
    "LogCompactedAway",
    "PipelineError",
    "PipelineNotRunning",
    "SourceUnavailable",
    "TransformFailed",
    "UnknownPipeline",
    "UnknownWriter",
    "WriteFailed",
    "WriterBusy",
]


class PipelineError(HubstreamError):
    """Root of the pipeline errors."""


class EntryTooLarge(PipelineError):
    """One entry of an append is larger than a commit-log record may be; nothing was appended."""

    def __init__(self, index: int, size: int, limit: int) -> None:
        super().__init__(f"an entry of {size} bytes is larger than a commit-log record may be ({limit})")
        self.index, self.size, self.limit = index, size, limit


class InvalidDefinition(InvalidInput):
    """A pipeline definition (YAML or Python module) is malformed: `problems` are all its findings,
    one line each (the message joins them with newlines)."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class UnknownPipeline(NotFound):
    """No pipeline state exists under that name."""


class PipelineNotRunning(ServiceUnavailable):
    """The pipeline process is starting (recovering its offsets) or stopping; retry."""


class SourceUnavailable(ServiceUnavailable):
    """The reader's source cannot be read now (e.g. its Kafka topic does not exist yet); the reader
    tries again, and the pipeline's status shows the reason."""


class UnknownWriter(NotFound):
    """The pipeline has no writer of that name."""


class WriterBusy(ConflictError):
    """The operation needs the writer to be stopped first."""


class WriteFailed(PipelineError):
    """A writer's sink refused or did not confirm a write."""


class TransformFailed(PipelineError):
    """A step of a writer's chain raised on a message (`step` names it, the cause is chained)."""

    def __init__(self, step: str, error: Exception) -> None:
        super().__init__(f"step {step}: {type(error).__name__}: {error}")
        self.step = step
        self.error = error


class LogCompactedAway(ConflictError):
    """A writer's next offset is below the commit log's first retained offset."""
