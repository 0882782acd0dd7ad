"""Asking the copy that owns a key "what is the state of key K", over Kafka (pure parts).

A requester writes a `Request` to `<name>-requests`, in the key's lane partition (or in every
lane partition when the lane cannot be computed from the key alone), and reads `<name>-replies`
from the end it had before asking. The copy owning a lane partition reads that partition of the
requests topic and answers with its live view of the key (`owner_answer`). A lane nobody answers
in time is answered from the changelog `<name>-state` instead (`ask`), and the result says so.

The Kafka side lives in `app.consumer.inspect` (the requester) and `app.consumer.key_questions` (the
owner); this module holds the codec, the routing and the merge, so they are tested without a
broker.
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

import orjson

from app.composite.routing import partition_for
from app.consumer.source import Source
from app.errors import HubstreamError
from app.ordered.rules import GroupState

__all__ = [
    "REQUEST_MAX_AGE_MS",
    "Answer",
    "InFlight",
    "KeyAnswer",
    "LaneSet",
    "Request",
    "Transport",
    "ask",
    "decode_reply",
    "decode_request",
    "encode_reply",
    "encode_request",
    "key_route",
    "lane_of",
    "owner_answer",
]

# Older requests are not answered: their requester has given up (its timeout is shorter), and a
# copy starting at a requests partition's end may re-read a few (the broker's end under-reports).
REQUEST_MAX_AGE_MS = 10_000
# How the copies route ordering keys to lane partitions, as their heartbeats publish it.
CRC32 = "crc32"  # a plain topic keyed by the ordering key: librdkafka's default partitioner
COMPOSITE = "blake2b:"  # a composite topic keyed by the ordering key: its router, with K appended

Source_ = Literal["owner", "changelog"]
StateFrom = Literal["memory", "changelog"]


def key_route(by_record_key: bool, source: Source) -> str:
    """How an ordering key maps to its lane partition, or "" when it does not from the key alone
    (an ordering key taken from a header or a callable: records of one key can be anywhere)."""
    if not by_record_key:
        return ""
    if source.plain:
        return CRC32
    return f"{COMPOSITE}{source.composite.storage_topics[0].k}"


def lane_of(key: str, route: str, lanes: int) -> int | None:
    """The lane partition of `key` under `route`; None when it cannot be told from the key. A plain
    topic's producers are assumed to use librdkafka's default partitioner (consistent_random:
    CRC-32 of the key; an empty key goes to a random partition), as every producer here does."""
    if lanes < 1:
        return None
    if route == CRC32:
        return zlib.crc32(key.encode()) % lanes if key else None
    if route.startswith(COMPOSITE):
        return partition_for(key, lanes, int(route[len(COMPOSITE) :]))
    return None


@dataclass(frozen=True, slots=True)
class Request:
    id: str
    key: str
    asked_at_ms: int

    @classmethod
    def new(cls, key: str, now_ms: int) -> Request:
        return cls(uuid.uuid4().hex, key, now_ms)

    def stale(self, now_ms: int) -> bool:
        return now_ms - self.asked_at_ms > REQUEST_MAX_AGE_MS


def encode_request(request: Request) -> bytes:
    return orjson.dumps(asdict(request))


def decode_request(value: bytes | None) -> Request | None:
    """None for anything that is not a request (another writer's record, a damaged one)."""
    try:
        data = orjson.loads(value or b"")
        return Request(str(data["id"]), str(data["key"]), int(data["asked_at_ms"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class InFlight:
    """The key's record a worker is on now (its handler call, or the write of its retry, DLQ or
    state after it): the source record's topic and offset, and the attempt (1: the first)."""

    topic: str
    offset: int
    attempt: int
    message_id: str


@dataclass(frozen=True, slots=True)
class Answer:
    """What is known of a key in one lane partition: its owner's live view, or the changelog's.

    `state` is the key's GroupState (JSON; None: no state, the key never failed or recovered),
    from the owner's memory or from `<name>-state`. The rest only an owner knows: the record
    running now, whether the key's lane is busy (a record admitted and not finished: running, or
    waiting for a free worker), how many of its records wait in the lane behind that one, and the
    retry copies this copy read and has not admitted yet (with the first one's due time: the
    others wait behind it)."""

    partition: int
    source: Source_
    state: dict[str, Any] | None
    state_from: StateFrom = "changelog"
    member: str | None = None
    in_flight: InFlight | None = None
    lane_busy: bool = False
    waiting: int = 0
    retry_waiting: int = 0
    next_retry_due_ms: int | None = None
    # The copy holds the partition but not its key states in memory: still loading them as it
    # takes the partition (or, for a moment, giving it up); `state` is the changelog's.
    loading: bool = False
    at_ms: int = 0  # when the owner answered; for the changelog, when the state was written

    @property
    def active(self) -> bool:
        """Anything to say: a state, or the key's records here now."""
        return self.state is not None or self.lane_busy or self.retry_waiting > 0


def encode_reply(request_id: str, answer: Answer) -> bytes:
    return orjson.dumps({"id": request_id, "answer": asdict(answer)})


def decode_reply(value: bytes | None) -> tuple[str, Answer] | None:
    try:
        data = orjson.loads(value or b"")
        a = dict(data["answer"])
        flight = a.pop("in_flight")
        a["in_flight"] = None if flight is None else InFlight(**flight)
        return str(data["id"]), Answer(**a)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def owner_answer(
    partition: int,
    member: str,
    state: GroupState | None,
    *,
    from_memory: bool,
    running: InFlight | None,
    lane_waiting: int | None,
    retry_due_ms: Iterable[int],
    now_ms: int,
) -> Answer:
    """The owner's answer. `lane_waiting`: None when the key's lane is idle, else the records
    waiting behind its running one; `retry_due_ms`: due times of the key's retry copies this copy
    read and has not admitted yet, in the retry partition's order (the first one holds the rest:
    a sidelined copy is due at once but waits behind it)."""
    due = list(retry_due_ms)
    return Answer(
        partition=partition,
        source="owner",
        state=None if state is None else state.to_json(),
        state_from="memory" if from_memory else "changelog",
        member=member,
        in_flight=running,
        lane_busy=lane_waiting is not None,
        waiting=lane_waiting or 0,
        retry_waiting=len(due),
        next_retry_due_ms=due[0] if due else None,
        loading=not from_memory,
        at_ms=now_ms,
    )


@dataclass(frozen=True, slots=True)
class KeyAnswer:
    """The state of a key: per lane partition, its owner's answer, or the changelog's where no
    owner answered. `source`: "owner" (every lane asked answered by its owner), "changelog" (none
    did, or no copy is live) or "mixed"."""

    key: str
    source: Literal["owner", "changelog", "mixed"]
    partitions: dict[int, Answer]
    asked: tuple[int, ...] = ()  # the lane partitions asked (all of them when the lane is unknown)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["partitions"] = {str(p): asdict(a) for p, a in sorted(self.partitions.items())}
        return out


class Transport(Protocol):
    """The requester's side of the broker (blocking)."""

    def routes(self) -> list[str]:
        """`key_route` of each live copy (empty: no copy is live)."""
        ...

    def lanes(self) -> int:
        """The requests topic's partition count (0: no requests topic)."""
        ...

    def reply_mark(self) -> int:
        """The replies topic's end offset now."""
        ...

    def send(self, partitions: list[int], request: Request) -> None:
        """Write `request` to these requests partitions, confirmed."""
        ...

    def replies(self, since: int, timeout_s: float) -> Iterator[tuple[str, Answer]]:
        """Replies from offset `since` as they come, until `timeout_s` passed."""
        ...

    def changelog(self, key: str) -> dict[int, dict[str, Any]]:
        """The key's newest value per partition in `<name>-state` (`inspect.key_state`)."""
        ...


def _now_ms() -> int:
    return int(time.time() * 1000)


def ask(
    transport: Transport,
    key: str,
    timeout_s: float = 5.0,
    *,
    everywhere: bool = False,
    now_ms: Callable[[], int] | None = None,
) -> KeyAnswer:
    """Ask the owners of `key`'s lane (every lane with `everywhere`, or when the copies' route does
    not tell it) and wait up to `timeout_s` for their replies; a lane not answered by then is
    answered from the changelog."""
    clock = now_ms or _now_ms
    routes = transport.routes()
    lanes = transport.lanes() if routes else 0
    if not lanes:
        why = "no live copy" if not routes else "no requests topic (copies of an older version?)"
        return _from_changelog(key, transport.changelog(key), (), f"{why}: from the changelog")
    lane = None if everywhere or len(set(routes)) != 1 else lane_of(key, routes[0], lanes)
    asked = (lane,) if lane is not None else tuple(range(lanes))
    request = Request.new(key, clock())
    mark = transport.reply_mark()
    try:
        transport.send(list(asked), request)
    except HubstreamError as exc:
        return _from_changelog(
            key, transport.changelog(key), asked, f"request not written ({exc}): from the changelog"
        )
    answers: dict[int, Answer] = {}
    for request_id, answer in transport.replies(mark, timeout_s):
        if request_id == request.id and answer.partition in asked:
            answers.setdefault(answer.partition, answer)
            if len(answers) == len(asked):
                break
    return merge(key, asked, answers, transport.changelog, timeout_s)


def merge(
    key: str,
    asked: tuple[int, ...],
    answers: dict[int, Answer],
    changelog: Callable[[str], dict[int, dict[str, Any]]],
    timeout_s: float,
) -> KeyAnswer:
    """The owners' answers, and the changelog's for the lanes no owner answered. Asking every lane,
    only the answers with something to say are kept."""
    kept = {p: a for p, a in answers.items() if len(asked) == 1 or a.active}
    missing = [p for p in asked if p not in answers]
    if not missing:
        return KeyAnswer(key, "owner", kept, asked)
    logged = changelog(key)
    for p in missing:
        if p in logged:
            kept[p] = _changelog_answer(p, logged[p])
    source: Literal["changelog", "mixed"] = "changelog" if len(missing) == len(asked) else "mixed"
    note = f"no owner answered for partition(s) {missing} within {timeout_s:g} s: those from the changelog"
    return KeyAnswer(key, source, dict(sorted(kept.items())), asked, note)


def _from_changelog(
    key: str, logged: dict[int, dict[str, Any]], asked: tuple[int, ...], note: str
) -> KeyAnswer:
    answers = {p: _changelog_answer(p, v) for p, v in sorted(logged.items()) if not asked or p in asked}
    return KeyAnswer(key, "changelog", answers, asked, note)


def _changelog_answer(partition: int, value: dict[str, Any]) -> Answer:
    return Answer(partition, "changelog", value.get("s"), at_ms=int(value.get("at_ms", 0)))


class LaneSet:
    """The lane partitions a copy answers for, handed from its poll thread (the rebalance
    callbacks) to its request reader thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lanes: frozenset[int] = frozenset()

    def add(self, lanes: Iterable[int]) -> None:
        with self._lock:
            self._lanes = self._lanes | frozenset(lanes)

    def remove(self, lanes: Iterable[int]) -> None:
        with self._lock:
            self._lanes = self._lanes - frozenset(lanes)

    def now(self) -> frozenset[int]:
        with self._lock:
            return self._lanes
