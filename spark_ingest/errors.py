"""Errors of the Spark ingest job."""

from __future__ import annotations

from app.errors import HubstreamError, InvalidInput, ServiceUnavailable

__all__ = ["BatchTrackingFailed", "DeliveryFailed", "IngestFailed", "InputSchemaError"]


class InputSchemaError(InvalidInput):
    """The input files lack a required column or cannot be read in the named format."""


class DeliveryFailed(ServiceUnavailable):
    """The broker did not confirm every message of a Spark task; the task fails so Spark retries it."""


class IngestFailed(HubstreamError):
    """The Spark job failed after its task retries; nothing was confirmed as complete."""


class BatchTrackingFailed(ServiceUnavailable):
    """The batch API did not answer or refused a request."""
