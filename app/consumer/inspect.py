"""What any process can ask about a consumer from its topics, without being one of its copies:
the live members, the state of a key, the dead letters."""

from __future__ import annotations

from typing import Any

import orjson

from app.consumer.engine import KEY_HEADER
from app.consumer.members import Member, live_members
from app.kafka.admin import KafkaAdmin
from app.kafka.reading import read_from, read_topic
from app.subscription.errors import UndecodableMessage
from app.subscription.records import decode_internal, user_headers

__all__ = ["dead_letters", "key_state", "members"]


def members(bootstrap: str, name: str) -> list[Member]:
    return live_members([(m.key(), m.value()) for m in read_topic(bootstrap, f"{name}-members")])


def key_state(bootstrap: str, name: str, key: str) -> dict[int, dict[str, Any]]:
    """The newest state of `key` in each partition that has one (a key that never failed has none:
    it is delivered straight away)."""
    found: dict[int, dict[str, Any] | None] = {}
    wanted = key.encode()
    topic = f"{name}-state"
    partitions = _partitions(bootstrap, topic)
    for msg in read_from(bootstrap, {(topic, p): 0 for p in partitions}):
        if msg.key() == wanted:
            value = msg.value()
            found[msg.partition()] = None if value is None else orjson.loads(value)
    return {p: v for p, v in found.items() if v is not None}


def dead_letters(bootstrap: str, name: str, limit: int = 100) -> list[dict[str, Any]]:
    """The first `limit` dead letters, each with its source, key and the reason it failed."""
    topic = f"{name}-dlq"
    out: list[dict[str, Any]] = []
    for msg in read_from(bootstrap, {(topic, p): 0 for p in _partitions(bootstrap, topic)}):
        headers = list(msg.headers() or ())
        entry: dict[str, Any] = {
            "partition": msg.partition(),
            "offset": msg.offset(),
            "key": (msg.key() or b"").decode("utf-8", "replace"),
            "ordering_key": dict(headers).get(KEY_HEADER, b"").decode("utf-8", "replace"),
            "value": (msg.value() or b"").decode("utf-8", "replace"),
            "headers": {k: v.decode("utf-8", "replace") for k, v in user_headers(headers)},
        }
        try:
            meta = decode_internal(headers)
            entry.update(message_id=meta.message_id, attempts=meta.failed_attempts)
            if meta.failure is not None:
                f = meta.failure
                entry.update(reason=f.reason, error_class=f.error_class, error=f.error, source=f.source)
        except UndecodableMessage as exc:
            entry.update(reason="undecodable", error=str(exc))
        out.append(entry)
        if len(out) >= limit:
            break
    return out


def _partitions(bootstrap: str, topic: str) -> list[int]:
    count = KafkaAdmin(bootstrap).topics().get(topic, 0)
    return list(range(count))
