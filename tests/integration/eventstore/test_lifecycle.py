"""A stream's lifecycle on the Cosmos endpoint, through `hubstream es`: dump, prune (the state
still loads), delete (refused without --yes; a delete cut at its named crash point leaves a
loadable stream and running it again finishes)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from app.cosmos import CosmosStore
from app.crashpoints import InjectedFault, armed
from app.eventstore import Cache, Snapshot, StoreOptions, open_event_store
from app.eventstore.cosmos import PARTITION_KEY_PATH
from tests.unit.eventstore import favorites as fav

pytestmark = pytest.mark.integration

NOW = datetime(2024, 5, 1, tzinfo=UTC)


async def es(cosmos: CosmosStore, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COSMOS_DATABASE": cosmos.database.id}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli.main", "es", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def answer(cosmos: CosmosStore, *args: str) -> dict[str, Any]:
    done = await es(cosmos, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed: dict[str, Any] = orjson.loads(done.stdout)
    return parsed


async def test_dump_prune_and_delete_a_stream(cosmos: CosmosStore, unique: str) -> None:
    container, stream = f"es-life-{unique}", f"Favorites-{unique}"
    store = await open_event_store(cosmos, container, StoreOptions(max_events_in_tip=3))
    category = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache())
    for i in range(10):
        await category.transact(stream, fav.Add(i, f"n{i}", NOW), meta={"correlationId": f"c{i}"})
    state = (await category.load(stream)).state

    dump = await answer(cosmos, "dump", stream, "--container", container)
    assert [e["i"] for e in dump["events"]] == list(range(10)) and dump["version"] == 10
    assert [e["m"] for e in dump["events"]] == [{"correlationId": f"c{i}"} for i in range(10)]
    assert [u["c"] for u in dump["unfolds"]] == ["Compacted"]

    pruned = await answer(cosmos, "prune", stream, "--before", "7", "--container", container)
    after = await answer(cosmos, "dump", stream, "--container", container)
    assert pruned["pruned"] > 0 and [e["i"] for e in after["events"]] == list(range(pruned["pruned"], 10))
    fresh = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot())
    assert (await fresh.load(stream)).state == state  # the tip's unfold still holds it

    refused = await es(cosmos, "delete", stream, "--container", container)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    with armed("eventstore.tip.delete", nth=1, action="raise"), pytest.raises(InjectedFault):
        await fresh.delete(stream)  # every batch went; the tip is left
    assert (await fresh.load(stream)).state == state
    deleted = await answer(cosmos, "delete", stream, "--container", container, "--yes")
    assert deleted["deleted"] >= 1  # the tip's events (every batch went before the cut)
    gone = await es(cosmos, "dump", stream, "--container", container)
    assert gone.returncode == 2 and "no stream" in gone.stderr
    assert (await fresh.load(stream)).state == ()


async def test_a_delete_cut_between_batches_is_finished_by_the_next(cosmos: CosmosStore, unique: str) -> None:
    container, stream = f"es-cut-{unique}", f"Favorites-{unique}"
    store = await open_event_store(cosmos, container, StoreOptions(max_events_in_tip=2))
    category = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache())
    for i in range(9):
        await category.transact(stream, fav.Add(i, f"n{i}", NOW))
    state = (await category.load(stream)).state
    with armed("eventstore.batch.delete", nth=2, action="raise"), pytest.raises(InjectedFault):
        await category.delete(stream)
    assert (await category.load(stream)).state == state
    assert await category.delete(stream) > 0
    assert (await category.load(stream)).state == ()


async def test_init_creates_the_container_with_its_indexing_policy_and_stats_surveys_it(
    cosmos: CosmosStore, unique: str
) -> None:
    container = f"es-init-{unique}"
    created = await answer(cosmos, "init", "--container", container, "--throughput", "400")
    excluded = {p["path"] for p in created["indexingPolicy"]["excludedPaths"]}
    assert {"/e/*", "/u/*"} <= excluded and created["partitionKey"]["paths"] == ["/p"]
    store = await open_event_store(cosmos, container, StoreOptions(max_events_in_tip=2))
    for stream, n in ((f"Favorites-a{unique}", 5), (f"Favorites-b{unique}", 1), (f"Other-c{unique}", 2)):
        category = store.category(stream.split("-")[0], fav.DECIDER, fav.CODEC, Snapshot())
        for i in range(n):
            await category.transact(stream, fav.Add(i, "x", NOW))
    stats = await answer(cosmos, "stats", "--container", container)
    assert (stats["streams"], stats["events"]) == (3, 8)
    assert stats["categories"] == {"Favorites": 2, "Other": 1} and "matching" not in stats
    query = await answer(cosmos, "stats", "--container", container, "--category", "Favorites")
    assert sorted(s["stream"] for s in query["matching"]) == [f"Favorites-a{unique}", f"Favorites-b{unique}"]
    assert {s["stream"]: s["version"] for s in query["matching"]}[f"Favorites-a{unique}"] == 5


async def test_a_category_ttl_is_stored_on_every_document_of_a_container_with_item_ttl_on(
    cosmos: CosmosStore, unique: str
) -> None:
    """The endpoint keeps TTLs but never expires (real Cosmos DB does; the expiry itself is the
    memory store's unit test): what is checked here is what Cosmos DB acts on."""
    container = f"es-ttl-{unique}"
    created = await answer(cosmos, "init", "--container", container)
    assert created["defaultTtl"] == -1, "per-item time to live on, nothing expiring by default"
    store = await open_event_store(cosmos, container, StoreOptions(max_events_in_tip=2))
    stream = f"Favorites-t{unique}"
    category = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), ttl_s=3600)
    for i in range(3):
        await category.transact(stream, fav.Add(i, "x", NOW))
    proxy = await cosmos.container(container, PARTITION_KEY_PATH)
    query = "SELECT * FROM c WHERE c.p = @p"
    found = proxy.query_items(query, parameters=[{"name": "@p", "value": stream}], partition_key=stream)
    documents = [doc async for doc in found]
    assert len(documents) == 2 and {doc["ttl"] for doc in documents} == {3600}  # a batch and the tip
