"""The event store through the real azure-cosmos SDK against a transport that answers as real
Cosmos DB does where the embedded endpoint does not (304, 429, 408, 503, 449); 412 comes from
the endpoint itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from app.cosmos import CosmosStore, open_cosmos
from app.eventstore import Cache, Snapshot, StoreOptions, open_event_store
from app.eventstore.errors import StoreUnavailable
from app.settings import Settings
from tests.support.cosmos_semantics import CosmosSemantics
from tests.unit.eventstore import favorites as fav

pytestmark = pytest.mark.integration

NOW = datetime(2024, 5, 1, tzinfo=UTC)


@pytest_asyncio.fixture
async def real(stack: Settings, unique: str) -> AsyncIterator[tuple[CosmosSemantics, CosmosStore]]:
    transport = CosmosSemantics(connection_verify=False)
    store = await open_cosmos(stack, database=f"sem-{unique}", transport=transport)
    yield transport, store
    await store.client.delete_database(store.database.id)
    await store.close()


async def favorites(cosmos: CosmosStore, unique: str) -> tuple[Any, str]:
    """The Favorites category (snapshots, cached) on a fresh container, and a stream name."""
    store = await open_event_store(
        cosmos, container=f"es-{unique}", options=StoreOptions(max_events_in_tip=4)
    )
    return store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache()), f"Favorites-{unique}"


async def test_a_cached_reread_of_an_unchanged_stream_is_a_304_not_a_corrupt_stream(
    real: tuple[CosmosSemantics, CosmosStore], unique: str
) -> None:
    transport, cosmos = real
    cat, stream = await favorites(cosmos, unique)
    await cat.transact(stream, fav.Add(1, "one", NOW))
    loaded = await cat.load(stream)  # cached etag: If-None-Match, answered 304
    assert transport.answered.get(304, 0) >= 1
    assert [x.id for x in loaded.state] == [1] and loaded.version == 1
    await cat.transact(stream, fav.Add(2, "two", NOW))  # decides on the cached state after a 304
    assert sorted(x.id for x in (await cat.load(stream)).state) == [1, 2]


async def test_a_throttled_write_is_retried_by_the_sdk_after_x_ms_retry_after_ms(
    real: tuple[CosmosSemantics, CosmosStore], unique: str
) -> None:
    transport, cosmos = real
    cat, stream = await favorites(cosmos, unique)
    await cat.transact(stream, fav.Add(1, "one", NOW))
    transport.fail_next(429, count=2, method="PUT", retry_after_ms=20)
    await cat.transact(stream, fav.Add(2, "two", NOW))
    assert transport.answered.get(429) == 2
    assert [index for index, _ in await cat.read_events(stream)] == [0, 1]


@pytest.mark.parametrize(
    ("status", "method", "applied"),
    [
        (408, "PUT", False),
        (408, "PUT", True),  # the tip was replaced, the answer lost: the retry must not add it again
        (503, "PUT", False),
        (503, "GET", False),
        (449, "PUT", False),
        (449, "GET", False),
    ],
)
async def test_a_failed_or_unanswered_write_surfaces_retriable_and_a_retry_adds_each_event_once(
    real: tuple[CosmosSemantics, CosmosStore], unique: str, status: int, method: str, applied: bool
) -> None:
    transport, cosmos = real
    cat, stream = await favorites(cosmos, unique)
    await cat.transact(stream, fav.Add(1, "one", NOW))
    transport.fail_next(status, count=1, method=method, applied=applied)
    try:
        await cat.transact(stream, fav.Add(2, "two", NOW))
    except StoreUnavailable as exc:  # the SDK does not retry this one: the caller may
        assert exc.retriable
        await cat.transact(stream, fav.Add(2, "two", NOW))
    assert transport.answered.get(status) == 1
    events = await cat.read_events(stream)
    assert [index for index, _ in events] == [0, 1], "no torn stream, each event once"
    assert sorted(x.id for x in (await cat.load(stream)).state) == [1, 2]


async def test_throttling_that_outlasts_the_sdk_retries_is_a_retriable_store_error(
    real: tuple[CosmosSemantics, CosmosStore], unique: str
) -> None:
    transport, cosmos = real
    cat, stream = await favorites(cosmos, unique)
    transport.fail_next(429, count=1000, method="POST")
    with pytest.raises(StoreUnavailable) as caught:
        await cat.transact(stream, fav.Add(1, "one", NOW))
    assert caught.value.retriable
    transport.faults.clear()
    await cat.transact(stream, fav.Add(1, "one", NOW))
    assert [index for index, _ in await cat.read_events(stream)] == [0]


async def test_a_stale_etag_412_re_decides_on_the_winners_events(
    real: tuple[CosmosSemantics, CosmosStore], unique: str
) -> None:
    _, cosmos = real
    first, stream = await favorites(cosmos, unique)
    second, _ = await favorites(cosmos, unique)  # another writer with its own cache
    await first.transact(stream, fav.Add(1, "one", NOW))
    await second.load(stream)  # caches version 1
    await first.transact(stream, fav.Add(2, "two", NOW))
    await second.transact(stream, fav.Add(2, "two", NOW), assume_cached=True)  # 412, then re-decide
    events = await first.read_events(stream)
    assert [index for index, _ in events] == [0, 1], "the loser saw item 2 added and decided nothing"
