"""Parse a produce file: JSON lines of {"group_id": str, "payload": any}; validate all before sending."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from app.composite.model import check_group_id
from app.errors import HubstreamError, InvalidInput

__all__ = ["read_produce_file"]


def read_produce_file(path: Path, max_group_id_bytes: int) -> list[tuple[str, Any]]:
    records: list[tuple[str, Any]] = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise InvalidInput(f"{path}:{number}: invalid JSON ({exc})") from exc
            if not isinstance(item, dict) or "group_id" not in item or "payload" not in item:
                raise InvalidInput(f'{path}:{number}: expected an object with "group_id" and "payload"')
            try:
                check_group_id(item["group_id"], max_group_id_bytes)
            except HubstreamError as exc:
                raise InvalidInput(f"{path}:{number}: {exc}") from exc
            records.append((item["group_id"], item["payload"]))
    return records
