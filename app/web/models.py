"""The base of every HTTP body model, and the error body every endpoint shares.

Python fields are snake_case; on the wire every JSON key is camelCase (the batch API's Carlyle
casing, kept for every endpoint).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["ApiModel", "Error", "Liveness", "RequestModel", "omitted_when_none", "to_wire"]


class ApiModel(BaseModel):
    """A JSON body: camelCase on the wire, built and read by Python field name too."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class RequestModel(ApiModel):
    """A request body: strict types (no "3" for 3, no true for 1), unknown keys ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, strict=True)


class Error(ApiModel):
    """Every 4xx/5xx answer."""

    error: str
    reason: str


class Liveness(ApiModel):
    """Faust's index page (GET /)."""

    status: str


def to_wire(model: BaseModel) -> dict[str, Any]:
    """A model as the JSON object it is on the wire (camelCase keys)."""
    return model.model_dump(mode="json", by_alias=True)


def _is_none(value: object) -> bool:
    return value is None


def omitted_when_none() -> Any:
    """A field's default for a key the answer leaves out rather than sends as null."""
    return Field(default=None, exclude_if=_is_none)
