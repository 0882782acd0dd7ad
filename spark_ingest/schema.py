"""The input schema of the ingest job and row validation (pure: no Spark, no Kafka).

Every format carries the same columns:

| column       | type    | required | meaning                                          |
|--------------|---------|----------|--------------------------------------------------|
| recipient    | string  | yes      | market actor id; the group id and the Kafka key  |
| origin       | string  | yes      | timeseries, aggregations or masterdata           |
| message_type | string  | yes      | 1-100 characters                                 |
| weight       | integer | yes      | bytes announced, 1 .. 50 MB                      |
| bundleable   | boolean | no       | default true                                     |
| id           | GUID    | no       | the event id, used as given when present         |
| key          | string  | no       | the source's row key; the id is derived from it  |

Rows are validated with `app.dataavailable.parse`, so the job accepts exactly what the
hub accepts. Ids are deterministic (see `event_id`), so re-running the same input yields
the same ids and the hub's idempotent save absorbs the repeat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.dataavailable import DataAvailable, deterministic_id, parse
from app.errors import InvalidInput

__all__ = [
    "FORMATS",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "RowSource",
    "csv_record",
    "event_id",
    "missing_columns",
    "validate_row",
]

FORMATS: tuple[str, ...] = ("parquet", "csv", "jsonl")
REQUIRED_COLUMNS: tuple[str, ...] = ("recipient", "origin", "message_type", "weight")
OPTIONAL_COLUMNS: tuple[str, ...] = ("bundleable", "id", "key")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


@dataclass(frozen=True, slots=True)
class RowSource:
    """Where a row came from: the file's identity (path relative to the input root) and its row index."""

    file: str
    row: int


def missing_columns(columns: list[str]) -> list[str]:
    """Required columns a tabular input (Parquet, CSV) lacks; JSON lines are checked per row."""
    present = set(columns)
    return [name for name in REQUIRED_COLUMNS if name not in present]


def event_id(record: dict[str, Any], source: RowSource) -> str:
    """The event id: `id` as given; else derived from `key`; else from the file identity and row index."""
    given = record.get("id")
    if given not in (None, ""):
        return given  # type: ignore[no-any-return]  # parse checks it is a GUID string
    key = record.get("key")
    if key not in (None, ""):
        return deterministic_id("key", str(key))
    return deterministic_id("row", source.file, str(source.row))


def csv_record(record: dict[str, Any]) -> dict[str, Any]:
    """CSV cells are text: convert weight and bundleable the way a user means them; parse checks the rest."""
    converted = dict(record)
    weight = converted.get("weight")
    if isinstance(weight, str):
        text = weight.strip()
        if text.lstrip("-").isascii() and text.lstrip("-").isdigit():  # "²" is a digit int() refuses
            converted["weight"] = int(text)
    bundleable = converted.get("bundleable")
    if bundleable is None or bundleable == "":
        converted.pop("bundleable", None)
    elif isinstance(bundleable, str) and bundleable.strip().lower() in _TRUE | _FALSE:
        converted["bundleable"] = bundleable.strip().lower() in _TRUE
    return converted


def validate_row(
    record: dict[str, Any], source: RowSource, batch_item_id: str | None = None
) -> DataAvailable:
    """One input row -> a valid DataAvailable, or InvalidInput with the reason."""
    data = {name: value for name, value in record.items() if value is not None and name != "key"}
    if record.get("bundleable") is None:
        data.pop("bundleable", None)
    data["id"] = event_id(record, source)
    if batch_item_id is not None:
        data["batch_item_id"] = batch_item_id
    elif "batch_item_id" in data:
        raise InvalidInput("DataAvailable: batch_item_id is assigned by the job, not the input")
    return parse(data)
