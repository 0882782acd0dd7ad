"""DataAvailable: the notification a domain sends when data is ready for a recipient (the MessageHub design).

One shared definition for the Spark ingest, the subscription feeding the hub, the hub and
the main job. `parse` validates untrusted input and raises InvalidInput naming the field.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from app.errors import InvalidInput

__all__ = ["DOMAINS", "MAX_WEIGHT_BYTES", "DataAvailable", "deterministic_id", "parse"]

DOMAINS: tuple[str, ...] = ("timeseries", "aggregations", "masterdata")
MAX_WEIGHT_BYTES = 50 * 1024 * 1024  # a bundle holds at most 50 MB; one event can't weigh more
_RECIPIENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
_NAMESPACE = uuid.UUID("6f0d5c1e-8c1b-4a4e-9a51-7d7c0c9d5a10")


@dataclass(frozen=True, slots=True)
class DataAvailable:
    id: str  # a GUID, unique per event; the idempotency key of the hub's Save
    recipient: str  # market actor (GLN/EIC number); the group id on `data-available`
    origin: str  # domain: one of DOMAINS
    message_type: str
    weight: int  # bytes of the payload this event announces
    bundleable: bool = True
    batch_item_id: str | None = None  # "batchId:groupId:index" when tracked by an exact batch

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["batch_item_id"] is None:
            del data["batch_item_id"]
        return data


def deterministic_id(*parts: str) -> str:
    """A GUID derived from the input (uuid5), so re-ingesting the same row yields the same id."""
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(parts)))


def _field(data: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in data:
        raise InvalidInput(f"DataAvailable: missing field {name!r}")
    value = data[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidInput(f"DataAvailable: field {name!r} has the wrong type ({type(value).__name__})")
    return value


def parse(data: Any) -> DataAvailable:
    """Validate a decoded JSON object into a DataAvailable."""
    if not isinstance(data, dict):
        raise InvalidInput("DataAvailable: expected a JSON object")
    event_id = _field(data, "id", str)
    try:
        uuid.UUID(event_id)
    except ValueError as exc:
        raise InvalidInput(f"DataAvailable: id {event_id[:80]!r} is not a GUID") from exc
    recipient = _field(data, "recipient", str)
    if not _RECIPIENT.match(recipient):
        raise InvalidInput(f"DataAvailable: recipient {recipient[:80]!r} is not a valid actor id")
    origin = _field(data, "origin", str).lower()
    if origin not in DOMAINS:
        raise InvalidInput(f"DataAvailable: origin {origin[:40]!r} is not one of {', '.join(DOMAINS)}")
    message_type = _field(data, "message_type", str)
    if not 0 < len(message_type) <= 100:
        raise InvalidInput("DataAvailable: message_type must be 1-100 characters")
    weight = _field(data, "weight", int)
    if not 0 < weight <= MAX_WEIGHT_BYTES:
        raise InvalidInput(f"DataAvailable: weight {weight} outside 1..{MAX_WEIGHT_BYTES}")
    bundleable = data.get("bundleable", True)
    if not isinstance(bundleable, bool):
        raise InvalidInput("DataAvailable: field 'bundleable' must be a boolean")
    item = data.get("batch_item_id")
    if item is not None and not isinstance(item, str):
        raise InvalidInput("DataAvailable: field 'batch_item_id' must be a string")
    return DataAvailable(event_id, recipient, origin, message_type, weight, bundleable, item)
