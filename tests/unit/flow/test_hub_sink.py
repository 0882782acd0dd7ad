"""The hub batch sink's outcomes: decode errors to DLQ, per-group stop at the first failure,
failure isolation when the hub refuses one event, acks only for saved events."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import pytest

from app import crashpoints
from app.crashpoints import InjectedFault
from app.dataavailable import DataAvailable, deterministic_id
from app.errors import InvalidInput, ServiceUnavailable
from app.flow.hub_sink import HubSink
from app.hub.errors import DuplicateEventConflict
from app.subscription.errors import NotAttempted
from app.subscription.records import SubscriptionMessage


class MemoryHub:
    """Keeps saved events per recipient; refuses ids listed in `conflicts` like the hub does."""

    def __init__(self, conflicts: set[str] = frozenset(), unavailable: bool = False) -> None:  # type: ignore[assignment]
        self.saved: dict[str, list[str]] = {}
        self.conflicts = conflicts
        self.unavailable = unavailable
        self.calls = 0

    async def save(self, events: Sequence[DataAvailable]) -> None:
        self.calls += 1
        if self.unavailable:
            raise ServiceUnavailable("cosmos down")
        bad = [e.id for e in events if e.id in self.conflicts]
        if bad:
            raise DuplicateEventConflict(f"event {bad[0]} saved before with other content")
        for event in events:
            self.saved.setdefault(event.recipient, []).append(event.id)


class MemoryAcks:
    def __init__(self, undelivered: int = 0) -> None:
        self.sent: list[str] = []
        self.undelivered = undelivered

    def send(self, item_ids: Sequence[str]) -> int:
        self.sent.extend(item_ids)
        return 1

    def flush(self, timeout_s: float = 30.0) -> int:
        return self.undelivered


GROUP = "0b9e1f44-6d0c-4a53-9d52-0c1f3c4f2a10"


def item(index: int) -> str:
    return f"8:{GROUP}:{index}"


def event(recipient: str, n: int, item: str | None = None) -> DataAvailable:
    return DataAvailable(
        deterministic_id(recipient, str(n)), recipient, "timeseries", "RSM-012", 1024, True, item
    )


def message(e: DataAvailable | bytes, group: str | None = None) -> SubscriptionMessage:
    payload = e if isinstance(e, bytes) else orjson.dumps(e.to_json())
    gid = group or (e.recipient if isinstance(e, DataAvailable) else "x")
    return SubscriptionMessage("hub-feed", gid, f"m-{hash(payload)}", payload, 1)


def sink(hub: MemoryHub, acks: MemoryAcks) -> HubSink:
    async def get() -> MemoryHub:
        return hub

    return HubSink(get, acks)


async def test_saves_in_order_and_acks_items() -> None:
    hub, acks = MemoryHub(), MemoryAcks()
    events = [event("a", 0, item(0)), event("b", 0, item(1)), event("a", 1, item(2)), event("a", 2)]
    outcomes = await sink(hub, acks)([message(e) for e in events])
    assert outcomes == [None, None, None, None]
    assert hub.saved == {"a": [events[0].id, events[2].id, events[3].id], "b": [events[1].id]}
    assert acks.sent == [item(0), item(1), item(2)]
    assert hub.calls == 1, "one save for the whole batch"


async def test_undecodable_message_fails_alone_and_stops_its_group() -> None:
    hub, acks = MemoryHub(), MemoryAcks()
    good = event("a", 0)
    later = event("a", 1)
    other = event("b", 0)
    batch = [message(b"{not json", group="a"), message(later), message(other), message(good, group="c")]
    outcomes = await sink(hub, acks)(batch)
    assert isinstance(outcomes[0], InvalidInput)
    assert "not JSON" in str(outcomes[0])
    assert isinstance(outcomes[1], NotAttempted)
    assert outcomes[2] is None
    assert isinstance(outcomes[3], InvalidInput), "recipient must match the group id"
    assert hub.saved == {"b": [other.id]}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"id": "nope", "recipient": "a", "origin": "timeseries", "message_type": "x", "weight": 1}, "GUID"),
        (
            {
                "id": deterministic_id("z"),
                "recipient": "a",
                "origin": "sales",
                "message_type": "x",
                "weight": 1,
            },
            "origin",
        ),
        (
            {"id": deterministic_id("z"), "recipient": "a", "origin": "timeseries", "message_type": "x"},
            "weight",
        ),
        (
            {
                "id": deterministic_id("z"),
                "recipient": "a",
                "origin": "timeseries",
                "message_type": "x",
                "weight": 1,
                "batch_item_id": "../../etc",
            },
            "",
        ),
    ],
)
async def test_invalid_events_are_rejected_with_a_reason(payload: dict[str, object], reason: str) -> None:
    outcomes = await sink(MemoryHub(), MemoryAcks())([message(orjson.dumps(payload), group="a")])
    assert isinstance(outcomes[0], InvalidInput)
    assert reason in str(outcomes[0])
    assert not outcomes[0].retriable


async def test_a_refused_event_is_isolated_within_its_recipient() -> None:
    events = [event("a", 0), event("a", 1), event("a", 2), event("b", 0)]
    hub, acks = MemoryHub(conflicts={events[1].id}), MemoryAcks()
    outcomes = await sink(hub, acks)([message(e) for e in events])
    assert outcomes[0] is None
    assert isinstance(outcomes[1], DuplicateEventConflict)
    assert isinstance(outcomes[2], NotAttempted)
    assert outcomes[3] is None
    assert hub.saved == {"a": [events[0].id], "b": [events[3].id]}


async def test_unavailable_hub_makes_every_message_retriable() -> None:
    outcomes = await sink(MemoryHub(unavailable=True), MemoryAcks())(
        [message(event("a", 0)), message(event("b", 0))]
    )
    assert all(isinstance(o, ServiceUnavailable) and o.retriable for o in outcomes)


async def test_a_hub_that_cannot_be_opened_makes_every_message_retriable_and_says_why() -> None:
    async def failing_open() -> MemoryHub:
        raise RuntimeError("container creation raced")

    outcomes = await HubSink(failing_open, MemoryAcks())([message(event("a", 0))])
    assert isinstance(outcomes[0], ServiceUnavailable) and outcomes[0].retriable
    assert "message hub not open: RuntimeError: container creation raced" in str(outcomes[0])


async def test_unconfirmed_acks_make_saved_messages_retriable() -> None:
    hub, acks = MemoryHub(), MemoryAcks(undelivered=1)
    outcomes = await sink(hub, acks)([message(event("a", 0, item(0)))])
    assert isinstance(outcomes[0], ServiceUnavailable)
    assert outcomes[0].retriable


async def test_a_payload_over_max_payload_bytes_is_refused_even_when_it_parses() -> None:
    hub = MemoryHub()
    padded = {**event("a", 0).to_json(), "padding": "x" * 2048}

    async def get() -> MemoryHub:
        return hub

    small = HubSink(get, MemoryAcks(), max_payload_bytes=1024)
    outcomes = await small([message(orjson.dumps(padded), group="a"), message(event("b", 0))])
    assert isinstance(outcomes[0], InvalidInput) and not outcomes[0].retriable
    assert "exceeds MAX_PAYLOAD_BYTES=1024" in str(outcomes[0])
    assert outcomes[1] is None and list(hub.saved) == ["b"]


async def test_a_crash_between_save_and_acks_fails_the_batch_so_it_comes_again() -> None:
    hub, acks = MemoryHub(), MemoryAcks()
    events = [event("a", 0, item(0)), event("a", 1, item(1))]
    with crashpoints.armed("flow.sink.before_acks"):
        outcomes = await sink(hub, acks)([message(e) for e in events])
    assert all(isinstance(o, InjectedFault) for o in outcomes)
    assert acks.sent == []  # nothing acked: the subscription delivers the batch again
    assert await sink(hub, acks)([message(e) for e in events]) == [None, None]
    assert acks.sent == [item(0), item(1)]
