"""The GroupState table's changelog read directly: the newest state record per group of a
subscription (used by shards when they open, and by offline operations such as unsideline).

Records are `<subscription>\x1f<group id>` -> JSON `{"e": epoch, "s": GroupState}`, in the slot
partition of the shard that owns the group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from app.kafka.broker import BrokerPort
from app.kafka.reading import read_from
from app.ordered.errors import UndecodableState
from app.ordered.rules import state_of_record

__all__ = ["SEP", "TABLE_NAME", "changelog_topic", "newest_states", "scan_states", "state_key"]

log = logging.getLogger(__name__)

SEP = "\x1f"
TABLE_NAME = "subscription-group-state"


def state_key(subscription: str, group_id: str) -> bytes:
    return f"{subscription}{SEP}{group_id}".encode()


def changelog_topic(app_id: str) -> str:
    """The GroupState table's changelog (Faust names it `<app_id>-<table>-changelog`)."""
    return f"{app_id}-{TABLE_NAME}-changelog"


# (slot partition, group id, the record's value or None for a tombstone), in the order read
Event = tuple[int, str, dict[str, Any] | None]


def scan_states(
    broker: BrokerPort, changelog: str, slots: int, subscription: str, timeout_s: float = 120.0
) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """Newest state record per group of `subscription`: group -> (epoch, slot partition, value).
    ServiceUnavailable when the changelog is not read to its end within `timeout_s`."""
    prefix = f"{subscription}{SEP}".encode()
    starts = {(changelog, p): 0 for p in range(slots)}
    loader = "hubstream-group-state-loader"

    def events() -> Iterator[Event]:
        for msg in read_from(broker, starts, timeout_s=timeout_s, group_id=loader, compacted=True):
            key, raw = msg.key() or b"", msg.value()
            if not key.startswith(prefix):
                continue
            group_id = key[len(prefix) :].decode("utf-8", "replace")
            if raw is None:
                yield msg.partition(), group_id, None
                continue
            value = _decoded(raw)
            if value is None:  # as if never written: the group's previous record stands
                log.error(
                    "%s[%d]@%d: state record of group %r of %s does not decode; "
                    "the group's previous state stands",
                    changelog,
                    msg.partition(),
                    msg.offset(),
                    group_id,
                    subscription,
                )
                continue
            yield msg.partition(), group_id, value

    return newest_states(events())


def _decoded(raw: bytes) -> dict[str, Any] | None:
    """A state record's value when it holds an epoch and a GroupState that decode, else None."""
    try:
        state_of_record(raw)
        value = orjson.loads(raw)
        int(value["e"])
    except (UndecodableState, KeyError, TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def newest_states(events: Iterable[Event]) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """Each group's state from the changelog's records as read: partitions come interleaved in
    any order, and order holds only within one. So each (group, slot) counts by its last record;
    of the slots where that is a state (not a tombstone), the newest epoch wins. A group forgotten
    has tombstones in every slot; one re-created since has a state after its slot's tombstone,
    which another slot's tombstone, read later, does not delete."""
    last: dict[str, dict[int, dict[str, Any] | None]] = {}
    for partition, group_id, value in events:
        last.setdefault(group_id, {})[partition] = value
    out: dict[str, tuple[int, int, dict[str, Any]]] = {}
    for group_id, by_slot in last.items():
        live = [(int(v["e"]), p, v) for p, v in by_slot.items() if v is not None]
        if live:
            out[group_id] = max(live, key=lambda found: (found[0], found[1]))
    return out
