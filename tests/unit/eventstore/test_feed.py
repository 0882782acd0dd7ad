"""An event store's container read through a change feed (latest-version mode: each changed
document once, at its latest version, in the order of the changes): every stored event of every
stream comes, in index order per stream, a repeat only as the whole run again; checked over random
writes to several streams with feed reads between them, on the memory store's documents."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.eventstore import EventStore, MemoryStreamStorage, Snapshot, StoreOptions
from app.eventstore.feed import feed_events
from app.eventstore.model import TIP_ID
from tests.unit.modelcheck.endpoint_order import Seen

from . import favorites as fav

NOW = datetime(2024, 5, 1, tzinfo=UTC)
STREAMS = ("Favorites-a", "Favorites-b", "Other-c")


class Feed:
    """Latest-version change feed over the memory store: documents written since the last read,
    by when they were last written (the store's etags count every write)."""

    def __init__(self, storage: MemoryStreamStorage) -> None:
        self.storage = storage
        self.read_up_to = 0

    def read(self) -> list[dict[str, Any]]:
        changed = [
            (lsn, body)
            for body in self.storage.documents.values()
            if (lsn := int(str(body["_etag"]).strip('"'))) > self.read_up_to
        ]
        changed.sort(key=lambda pair: pair[0])
        self.read_up_to = max((lsn for lsn, _ in changed), default=self.read_up_to)
        return [body for _, body in changed]


steps = st.lists(
    st.one_of(st.tuples(st.sampled_from(STREAMS), st.integers(0, 40)), st.just("read")), max_size=40
)


@settings(max_examples=80, deadline=None)
@given(steps=steps, max_events=st.integers(1, 4))
def test_every_event_comes_in_index_order_per_stream(steps: list[Any], max_events: int) -> None:
    storage = MemoryStreamStorage()
    store = EventStore(storage, StoreOptions(max_events_in_tip=max_events))
    categories = {s: store.category(s.split("-")[0], fav.DECIDER, fav.CODEC, Snapshot()) for s in STREAMS}
    feed = Feed(storage)
    seen: dict[str, Seen] = {s: Seen() for s in STREAMS}
    got: dict[str, set[int]] = {s: set() for s in STREAMS}

    def read() -> None:
        for body in feed.read():
            for event in feed_events(body):
                assert event.key == f"{event.stream}/{event.index}"
                seen[event.stream] = seen[event.stream].took(event.index)
                got[event.stream].add(event.index)

    async def run() -> None:
        for step in steps:
            if step == "read":
                read()
            else:
                stream, item = step
                await categories[stream].transact(stream, fav.Add(item, "x", NOW))
        read()

    asyncio.run(run())
    for stream in STREAMS:
        assert seen[stream].at_end() is None, (stream, seen[stream])
        tip = storage.documents.get((stream, TIP_ID))
        assert got[stream] == set(range(int(tip["n"]) if tip else 0))


def test_a_category_filter_and_documents_that_are_not_event_store_ones() -> None:
    tip = {"p": "Other-c", "id": TIP_ID, "i": 0, "n": 1, "e": [{"c": "Added", "d": {}, "m": None, "t": "x"}]}
    assert [e.key for e in feed_events(tip)] == ["Other-c/0"]
    assert feed_events(tip, category="Favorites") == []
    assert feed_events({"id": "something-else", "value": 1}) == []
