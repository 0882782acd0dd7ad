"""The Equinox.CosmosStore document layout, parsed and planned without any I/O.

Batch: ``{"p": stream, "id": str(i), "i": base index, "n": next index, "e": [{c, d, m, t}]}``.
Tip: ``{"id": "-1", ...the same..., "u": [{i, c, d, m, t, z?}], "_etag"}``; an unfold whose ``z``
is 1 carries ``d`` as base64 of zlib-deflated UTF-8 JSON.

Events [i, n) of the tip are committed; a batch document is committed only when its ``i`` is
below the tip's ``i`` (a calved batch written by a writer that died before replacing the tip is
invisible, and the next writer that calves at the same index grows it in place).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson

from app.eventstore.errors import CorruptStream, InvalidStreamName

__all__ = [
    "TIP_ID",
    "AppendPlan",
    "BatchDocument",
    "EncodedEvent",
    "EncodedUnfold",
    "TipDocument",
    "check_stream_name",
    "parse_batch",
    "parse_tip",
    "plan_append",
    "plan_unfold_only",
    "supersede",
    "utc_now_iso",
]

TIP_ID = "-1"
MAX_STREAM_NAME_CHARS = 1024
_COMPRESSED = 1


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_stream_name(stream: str) -> str:
    if not isinstance(stream, str) or not stream:
        raise InvalidStreamName("stream name must be a non-empty string")
    if len(stream) > MAX_STREAM_NAME_CHARS:
        raise InvalidStreamName(f"stream name is {len(stream)} chars; at most {MAX_STREAM_NAME_CHARS}")
    if any(ord(ch) < 32 for ch in stream):
        raise InvalidStreamName(f"stream name {stream!r} contains control characters")
    return stream


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    """One event as stored: case name, JSON data, optional metadata, ISO-8601 timestamp."""

    case: str
    data: Any
    meta: Mapping[str, Any] | None = None
    timestamp: str = field(default_factory=utc_now_iso)

    def to_json(self) -> dict[str, Any]:
        return {"c": self.case, "d": self.data, "m": self.meta, "t": self.timestamp}


@dataclass(frozen=True, slots=True)
class EncodedUnfold:
    """A snapshot event stored in the tip's ``u``; ``index`` is the version it was unfolded at."""

    index: int
    event: EncodedEvent

    def to_json(self, compress_min_bytes: int) -> dict[str, Any]:
        body: dict[str, Any] = {"i": self.index, **self.event.to_json()}
        raw = orjson.dumps(self.event.data)
        if len(raw) >= compress_min_bytes:
            body["d"] = base64.b64encode(zlib.compress(raw)).decode("ascii")
            body["z"] = _COMPRESSED
        return body


@dataclass(frozen=True, slots=True)
class BatchDocument:
    """An immutable batch of events [index, next_index)."""

    stream: str
    index: int
    events: tuple[EncodedEvent, ...]
    ttl: int | None = None  # Cosmos DB's per-item time to live (s after the last write); None: kept

    @property
    def next_index(self) -> int:
        return self.index + len(self.events)

    def to_json(self) -> dict[str, Any]:
        body = {
            "p": self.stream,
            "id": str(self.index),
            "i": self.index,
            "n": self.next_index,
            "e": [e.to_json() for e in self.events],
        }
        return body if self.ttl is None else {**body, "ttl": self.ttl}


@dataclass(frozen=True, slots=True)
class TipDocument:
    """The tip: events [index, next_index), the unfolds and the etag it was read with."""

    stream: str
    index: int
    events: tuple[EncodedEvent, ...]
    unfolds: tuple[EncodedUnfold, ...] = ()
    etag: str | None = None
    ttl: int | None = None  # as BatchDocument.ttl

    @property
    def next_index(self) -> int:
        return self.index + len(self.events)

    def to_json(self, compress_min_bytes: int) -> dict[str, Any]:
        body = {
            "p": self.stream,
            "id": TIP_ID,
            "i": self.index,
            "n": self.next_index,
            "e": [e.to_json() for e in self.events],
            "u": [u.to_json(compress_min_bytes) for u in self.unfolds],
        }
        return body if self.ttl is None else {**body, "ttl": self.ttl}


def _corrupt(stream: str, doc_id: object, reason: str) -> CorruptStream:
    return CorruptStream(f"stream {stream!r} document {doc_id!r}: {reason}")


def _int(body: Mapping[str, Any], key: str, stream: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _corrupt(stream, body.get("id"), f"field {key!r} must be a non-negative integer, got {value!r}")
    return value


def _event(raw: object, stream: str, doc_id: object) -> EncodedEvent:
    if not isinstance(raw, Mapping):
        raise _corrupt(stream, doc_id, f"event must be an object, got {type(raw).__name__}")
    case, meta, ts = raw.get("c"), raw.get("m"), raw.get("t")
    if not isinstance(case, str) or not case:
        raise _corrupt(stream, doc_id, f"event case 'c' must be a non-empty string, got {case!r}")
    if "d" not in raw:
        raise _corrupt(stream, doc_id, f"event {case!r} has no data 'd'")
    if meta is not None and not isinstance(meta, Mapping):
        raise _corrupt(stream, doc_id, f"event {case!r} metadata 'm' must be an object or null")
    return EncodedEvent(case=case, data=raw["d"], meta=meta, timestamp=ts if isinstance(ts, str) else "")


def _unfold(raw: object, stream: str) -> EncodedUnfold:
    if not isinstance(raw, Mapping):
        raise _corrupt(stream, TIP_ID, "unfold must be an object")
    index = _int(raw, "i", stream)
    event = _event(raw, stream, TIP_ID)
    if raw.get("z") == _COMPRESSED:
        try:
            data = orjson.loads(zlib.decompress(base64.b64decode(event.data, validate=True)))
        except (ValueError, TypeError, zlib.error) as exc:
            raise _corrupt(
                stream, TIP_ID, f"compressed unfold {event.case!r} does not decode: {exc}"
            ) from exc
        event = EncodedEvent(case=event.case, data=data, meta=event.meta, timestamp=event.timestamp)
    return EncodedUnfold(index=index, event=event)


def _events(body: Mapping[str, Any], stream: str) -> tuple[EncodedEvent, ...]:
    raw = body.get("e")
    if not isinstance(raw, list):
        raise _corrupt(stream, body.get("id"), f"field 'e' must be a list, got {type(raw).__name__}")
    events = tuple(_event(e, stream, body.get("id")) for e in raw)
    index, next_index = _int(body, "i", stream), _int(body, "n", stream)
    if next_index != index + len(events):
        raise _corrupt(stream, body.get("id"), f"'n'={next_index} but 'i'={index} and {len(events)} events")
    return events


def parse_tip(body: object, stream: str) -> TipDocument:
    """Validate a tip document read from the store; CorruptStream names what is wrong."""
    if not isinstance(body, Mapping):
        raise _corrupt(stream, TIP_ID, f"tip must be a JSON object, got {type(body).__name__}")
    if body.get("p") != stream:
        raise _corrupt(stream, TIP_ID, f"tip belongs to stream {body.get('p')!r}")
    events = _events(body, stream)
    raw_unfolds = body.get("u", [])
    if not isinstance(raw_unfolds, list):
        raise _corrupt(stream, TIP_ID, "field 'u' must be a list")
    etag = body.get("_etag")
    return TipDocument(
        stream=stream,
        index=_int(body, "i", stream),
        events=events,
        unfolds=tuple(_unfold(u, stream) for u in raw_unfolds),
        etag=etag if isinstance(etag, str) else None,
    )


def parse_batch(body: object, stream: str) -> BatchDocument:
    """Validate a calved batch document; its id must equal its base index."""
    if not isinstance(body, Mapping):
        raise _corrupt(stream, None, f"batch must be a JSON object, got {type(body).__name__}")
    index = _int(body, "i", stream)
    if body.get("id") != str(index):
        raise _corrupt(stream, body.get("id"), f"batch id must equal its base index {index}")
    return BatchDocument(stream=stream, index=index, events=_events(body, stream))


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """What one sync writes: an optional calved batch (first), then the new tip."""

    calved: BatchDocument | None
    tip: TipDocument


def _json_bytes(events: Sequence[EncodedEvent]) -> int:
    return len(orjson.dumps([e.to_json() for e in events]))


def plan_append(
    stream: str,
    tip: TipDocument | None,
    events: Sequence[EncodedEvent],
    unfolds: Sequence[EncodedUnfold],
    *,
    max_events: int,
    max_json_bytes: int,
) -> AppendPlan:
    """Merge ``events`` into the tip, or calve the tip's events into a batch when over a limit.

    The calved batch holds exactly the tip's events [tip.i, tip.n) and has id str(tip.i), so
    every writer that calves from that tip index writes the same document id.
    """
    if tip is None:
        return AppendPlan(None, TipDocument(stream, 0, tuple(events), tuple(unfolds)))
    merged = (*tip.events, *events)
    fits = len(merged) <= max_events and _json_bytes(merged) <= max_json_bytes
    if fits or not tip.events:
        return AppendPlan(
            None, TipDocument(stream, tip.index, merged, supersede(tip.unfolds, unfolds, tip.index))
        )
    calved = BatchDocument(stream, tip.index, tip.events)
    kept = supersede(tip.unfolds, unfolds, tip.next_index)
    return AppendPlan(calved, TipDocument(stream, tip.next_index, tuple(events), kept))


def plan_write(
    stream: str,
    tip: TipDocument | None,
    events: Sequence[EncodedEvent],
    unfolds: Sequence[EncodedUnfold],
    *,
    rolling: bool,
    max_events: int,
    max_json_bytes: int,
    ttl_s: int | None,
) -> AppendPlan:
    """What a sync writes (`plan_unfold_only` where the tip keeps its events, else `plan_append`),
    every document carrying the category's time to live (None: kept until deleted). A tip
    rewritten by each write lives while its stream is written; a calved batch expires `ttl_s`
    after it was calved, as if pruned."""
    if rolling:
        plan = AppendPlan(None, plan_unfold_only(stream, tip, unfolds))
    else:
        plan = plan_append(stream, tip, events, unfolds, max_events=max_events, max_json_bytes=max_json_bytes)
    if ttl_s is None:
        return plan
    calved = None if plan.calved is None else replace(plan.calved, ttl=ttl_s)
    return AppendPlan(calved, replace(plan.tip, ttl=ttl_s))


def plan_unfold_only(stream: str, tip: TipDocument | None, unfolds: Sequence[EncodedUnfold]) -> TipDocument:
    """RollingState: the tip keeps its events; the new unfolds supersede those of their cases."""
    if tip is None:
        return TipDocument(stream, 0, (), tuple(unfolds))
    return TipDocument(stream, tip.index, tip.events, supersede(tip.unfolds, unfolds, tip.index))


def supersede(
    stored: Sequence[EncodedUnfold], new: Sequence[EncodedUnfold], base_index: int
) -> tuple[EncodedUnfold, ...]:
    """The seed's sync rule: each new unfold supersedes the stored ones of its case. A stored unfold
    of another case (another writer's projection) stays while the event it was unfolded at is still
    in the tip (index >= the tip's base), and goes when appends moved the tip past it."""
    cases = {u.event.case for u in new}
    kept = tuple(u for u in stored if u.event.case not in cases and u.index >= base_index)
    return (*kept, *new)
