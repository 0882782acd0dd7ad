"""Parse a produce file: JSON lines of {"group_id": str, "payload": any}; validate all before sending
(group ids and payload sizes: a bad line anywhere writes nothing)."""

from __future__ import annotations

from pathlib import Path

import orjson

from app.composite.model import check_group_id
from app.composite.producer import encode_payload
from app.errors import HubstreamError, InvalidInput

__all__ = ["read_produce_file"]


def read_produce_file(path: Path, max_group_id_bytes: int, max_payload_bytes: int) -> list[tuple[str, bytes]]:
    """(group id, the payload as the producer sends it) per line."""
    records: list[tuple[str, bytes]] = []
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
                payload = encode_payload(item["payload"], max_payload_bytes)
            except HubstreamError as exc:
                raise InvalidInput(f"{path}:{number}: {exc}") from exc
            records.append((item["group_id"], payload))
    return records
