"""The GroupState table's changelog read directly: the newest state record per group of a
subscription (used by shards when they open, and by offline operations such as unsideline).

Records are `<subscription>\x1f<group id>` -> JSON `{"e": epoch, "s": GroupState}`, in the slot
partition of the shard that owns the group.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.kafka.reading import read_from

__all__ = ["SEP", "TABLE_NAME", "changelog_topic", "scan_states", "state_key"]

SEP = "\x1f"
TABLE_NAME = "subscription-group-state"


def state_key(subscription: str, group_id: str) -> bytes:
    return f"{subscription}{SEP}{group_id}".encode()


def changelog_topic(app_id: str) -> str:
    """The GroupState table's changelog (Faust names it `<app_id>-<table>-changelog`)."""
    return f"{app_id}-{TABLE_NAME}-changelog"


def scan_states(
    bootstrap: str, changelog: str, slots: int, subscription: str, timeout_s: float = 120.0
) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """Newest state record per group of `subscription`: group -> (epoch, slot partition, value).
    ServiceUnavailable when the changelog is not read to its end within `timeout_s`."""
    prefix = f"{subscription}{SEP}".encode()
    latest: dict[str, tuple[int, int, dict[str, Any]]] = {}
    starts = {(changelog, p): 0 for p in range(slots)}
    loader = "hubstream-group-state-loader"
    for msg in read_from(bootstrap, starts, timeout_s=timeout_s, group_id=loader, compacted=True):
        key = msg.key() or b""
        if not key.startswith(prefix):
            continue
        group_id = key[len(prefix) :].decode()
        if msg.value() is None:
            latest.pop(group_id, None)
            continue
        value = orjson.loads(msg.value())
        known = latest.get(group_id)
        if known is None or int(value["e"]) >= known[0]:
            latest[group_id] = (int(value["e"]), msg.partition(), value)
    return latest
