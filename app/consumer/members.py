"""Heartbeat records of the copies of a consumer, in its `<name>-members` topic (compacted, one
partition): member id -> what the copy owns and has done. A clean stop writes a tombstone; a copy
silent for three heartbeats is listed as gone."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import orjson

__all__ = ["Member", "decode_member", "live_members"]


@dataclass(frozen=True, slots=True)
class Member:
    member: str
    host: str
    pid: int
    started_ms: int
    at_ms: int
    heartbeat_s: float
    partitions: list[int] = field(default_factory=list)
    in_flight: int = 0
    buffered: int = 0
    attempts: int = 0
    failures: int = 0
    delivered: int = 0
    dead_lettered: int = 0
    lag: int = 0
    throttled: bool = False
    key_route: str = ""  # how ordering keys map to lane partitions (app.consumer.owner.key_route)

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    def alive(self, now_ms: int | None = None) -> bool:
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        return now - self.at_ms <= 3 * self.heartbeat_s * 1000


def decode_member(value: bytes) -> Member | None:
    """None for a record that is not a heartbeat (another writer's, or a damaged one)."""
    try:
        data = orjson.loads(value)
        return Member(**data) if isinstance(data, dict) else None
    except (orjson.JSONDecodeError, TypeError):
        return None


def live_members(records: list[tuple[bytes | None, bytes | None]], now_ms: int | None = None) -> list[Member]:
    """The newest heartbeat per member, of the members still alive, by member id."""
    newest: dict[bytes, Member | None] = {}
    for key, value in records:
        if key is None:
            continue
        newest[key] = None if value is None else decode_member(value)
    return sorted((m for m in newest.values() if m is not None and m.alive(now_ms)), key=lambda m: m.member)
