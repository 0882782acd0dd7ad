"""A stream's lifecycle on the in-memory storage: dump, prune (the tip and the state stay), delete
(batches first, the tip last; a cut delete is finished by the next; a write meanwhile wins)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.eventstore import Cache, EventStore, MemoryStreamStorage, Snapshot, StoreOptions, SyncConflict
from app.eventstore.lifecycle import dump_stream
from app.eventstore.model import TIP_ID

from . import favorites as fav

NOW = datetime(2024, 5, 1, tzinfo=UTC)
STREAM = "Favorites-x"


async def favourites(storage: MemoryStreamStorage, n: int) -> fav.State:
    store = EventStore(storage, StoreOptions(max_events_in_tip=3))
    category = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache())
    for i in range(n):
        await category.transact(STREAM, fav.Add(i, f"n{i}", NOW))
    return (await category.load(STREAM)).state


def category(storage: MemoryStreamStorage):  # type: ignore[no-untyped-def]
    return EventStore(storage, StoreOptions(max_events_in_tip=3)).category(
        "Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache()
    )


def batches(storage: MemoryStreamStorage) -> list[int]:
    return sorted(int(doc_id) for (p, doc_id) in storage.documents if p == STREAM and doc_id != TIP_ID)


async def test_dump_shows_every_event_with_its_index_and_the_unfolds() -> None:
    storage = MemoryStreamStorage()
    await favourites(storage, 8)
    dump = await dump_stream(storage, STREAM)
    assert dump is not None and dump.version == 8
    assert [i for i, _ in dump.events] == list(range(8))
    assert [e.case for _, e in dump.events] == ["Added"] * 8
    assert [(i, u.case) for i, u in dump.unfolds] == [(8, "Compacted")]
    assert await dump_stream(storage, "Favorites-none") is None


async def test_prune_deletes_whole_batches_before_the_index_and_the_state_still_loads() -> None:
    storage = MemoryStreamStorage()
    state = await favourites(storage, 10)
    before = batches(storage)
    removed = await category(storage).prune(STREAM, 7)
    dump = await dump_stream(storage, STREAM)
    assert dump is not None
    assert removed == 10 - len(dump.events) and all(i >= removed for i, _ in dump.events)
    assert removed > 0 and len(batches(storage)) < len(before)
    assert (await category(storage).load(STREAM)).state == state  # the tip's unfold holds it
    assert await category(storage).prune(STREAM, 10**6) >= 0  # never the tip's events
    assert (await dump_stream(storage, STREAM)) is not None


async def test_a_deleted_stream_is_gone_and_can_start_again() -> None:
    storage = MemoryStreamStorage()
    await favourites(storage, 10)
    assert await category(storage).delete(STREAM) == 10
    assert [k for k in storage.documents if k[0] == STREAM] == []
    assert (await category(storage).load(STREAM)).state == ()
    assert await favourites(storage, 2) == ((await category(storage).load(STREAM)).state)
    assert await category(storage).delete("Favorites-none") == 0


class CutAfter(MemoryStreamStorage):
    """Fails the `nth` batch delete (the process died there)."""

    def __init__(self, nth: int) -> None:
        super().__init__()
        self.nth, self.deletes = nth, 0

    async def delete_batch(self, stream: str, index: int) -> None:
        self.deletes += 1
        if self.deletes == self.nth:
            raise OSError("cut")
        await super().delete_batch(stream, index)


async def test_a_delete_cut_anywhere_leaves_a_loadable_stream_and_the_next_one_finishes() -> None:
    for nth in (1, 2, 3):
        storage = CutAfter(nth)
        state = await favourites(storage, 10)
        with pytest.raises(OSError):
            await category(storage).delete(STREAM)
        assert (await category(storage).load(STREAM)).state == state, nth  # the tip is still there
        await category(storage).delete(STREAM)
        assert [k for k in storage.documents if k[0] == STREAM] == [], nth


async def test_a_write_during_a_delete_wins_and_the_delete_says_so() -> None:
    class WriteMeanwhile(MemoryStreamStorage):
        async def delete_tip(self, stream: str, expected_etag: str) -> None:
            await category(self).transact(STREAM, fav.Add(99, "late", NOW))
            await super().delete_tip(stream, expected_etag)

    storage = WriteMeanwhile()
    await favourites(storage, 5)
    with pytest.raises(SyncConflict):
        await category(storage).delete(STREAM)
    assert any(item.id == 99 for item in (await category(storage).load(STREAM)).state)


async def test_metadata_given_to_a_decision_is_stored_with_each_of_its_events() -> None:
    storage = MemoryStreamStorage()
    favourites_ = category(storage)
    await favourites_.transact(STREAM, fav.Add(1, "a", NOW), meta={"correlationId": "c-1", "by": "ops"})
    await favourites_.decide(STREAM, lambda s: (None, [fav.Added(fav.Item(2, "b", NOW))]), meta={"by": "job"})
    await favourites_.transact(STREAM, fav.Add(3, "c", NOW))
    dump = await dump_stream(storage, STREAM)
    assert dump is not None
    assert [e.meta for _, e in dump.events] == [{"correlationId": "c-1", "by": "ops"}, {"by": "job"}, None]
