"""A pipeline following an event store's category through the container's change feed, on the
Cosmos endpoint (`reader: {type: cosmos, events: true, category: ...}`): every stored event of the
category's streams reaches the writer with its stream and index, in index order per stream (a
tip's events again only as the whole run again), and no other category's."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from app.cosmos import CosmosStore
from app.eventstore import Snapshot, StoreOptions, open_event_store
from app.settings import Settings
from tests.unit.eventstore import favorites as fav
from tests.unit.modelcheck.endpoint_order import Seen

from .support import run_until_idle

pytestmark = pytest.mark.integration

NOW = datetime(2024, 5, 1, tzinfo=UTC)


async def test_a_category_followed_in_index_order_per_stream(
    stack: Settings, cosmos: CosmosStore, unique: str, tmp_path: Path
) -> None:
    container = f"es-feed-{unique}"
    store = await open_event_store(cosmos, container, StoreOptions(max_events_in_tip=3))
    writes = {f"Favorites-a{unique}": 7, f"Favorites-b{unique}": 2, f"Other-c{unique}": 4}
    for stream, count in writes.items():
        category = store.category(stream.split("-")[0], fav.DECIDER, fav.CODEC, Snapshot())
        for i in range(count):
            await category.transact(stream, fav.Add(i, "x", NOW))
    target = tmp_path / "events.jsonl"
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: es-feed-{unique}\nbatch_size: 50\nbatch_wait_s: 0.05\n"
        f"reader: {{type: cosmos, container: {container}, database: {cosmos.database.id},"
        " events: true, category: Favorites, namespace: favorites}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {target}}}\n"
    )
    done = run_until_idle(file, tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = [orjson.loads(line) for line in target.read_bytes().splitlines()]
    events = [line["data"] for line in lines if line["op"] != "command"]
    by_stream: dict[str, list[int]] = defaultdict(list)
    for event in events:
        assert event["case"] == "Added" and set(event) == {"stream", "index", "case", "data", "meta", "time"}
        by_stream[event["stream"]].append(event["index"])
    assert set(by_stream) == {f"Favorites-a{unique}", f"Favorites-b{unique}"}
    for stream, indices in by_stream.items():
        seen = Seen()
        for index in indices:
            seen = seen.took(index)
        assert seen.at_end() is None, (stream, indices)
        assert set(indices) == set(range(writes[stream])), (stream, indices)
