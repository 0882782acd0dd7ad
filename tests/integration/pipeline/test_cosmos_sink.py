"""The pipeline's Cosmos DB writer replayed after a batch failed part-way (`pipeline.writer.cosmos.
upsert` and `pipeline.writer.cosmos.delete` raise, as a lost write would; a killed process replays
the batch from its writer's last saved offset the same way): the container ends as one clean write
of the batch leaves it."""

from __future__ import annotations

from typing import Any

import pytest

from app.cosmos import CosmosStore
from app.crashpoints import InjectedFault, armed
from app.pipeline.model import Message, Op
from app.pipeline.writers import CosmosSink
from app.settings import Settings

pytestmark = pytest.mark.integration


def _message(op: Op, doc_id: str, version: int = 0) -> Message:
    return Message(op, 0, "docs", {"id": doc_id, "v": version})


async def _documents(cosmos: CosmosStore, container: str) -> dict[str, int]:
    target: Any = await cosmos.container(container, "/id")
    return {d["id"]: d["v"] async for d in target.query_items("SELECT c.id, c.v FROM c")}


@pytest.mark.parametrize("point", ["pipeline.writer.cosmos.upsert", "pipeline.writer.cosmos.delete"])
async def test_a_batch_failed_part_way_and_written_again_ends_as_one_clean_write(
    stack: Settings, cosmos: CosmosStore, unique: str, point: str
) -> None:
    container = f"sink-{unique}"
    sink = CosmosSink(stack, {"container": container, "database": cosmos.database.id, "concurrency": 1})
    try:
        await sink.write([_message(Op.INSERT, f"d{i}") for i in range(10)])
        # even ids deleted, odd ones updated: 5 writes of each kind, cut at the third of one kind
        batch = [_message(Op.DELETE if i % 2 == 0 else Op.UPDATE, f"d{i}", 1) for i in range(10)]
        with armed(point, nth=3), pytest.raises(InjectedFault):
            await sink.write(batch)
        assert await _documents(cosmos, container) != {f"d{i}": 1 for i in range(1, 10, 2)}, "cut part-way"
        await sink.write(batch)  # the replay
        assert await _documents(cosmos, container) == {f"d{i}": 1 for i in range(1, 10, 2)}
    finally:
        await sink.close()


async def test_documents_sharing_an_id_in_different_partitions_are_all_written(
    stack: Settings, cosmos: CosmosStore, unique: str
) -> None:
    """A document is its id within its partition: two in one batch that share an id (as the hub's
    event documents in two drawers do) are two documents. Before, the batch kept only the last."""
    container = f"sink-pk-{unique}"
    options = {"container": container, "database": cosmos.database.id, "partition_key": "/drawer"}
    sink = CosmosSink(stack, options)
    try:
        batch = [
            Message(Op.INSERT, 0, "events", {"id": "0000000000000001", "drawer": d, "v": v})
            for v, d in enumerate(["drawer-a", "drawer-b", "drawer-a"])  # drawer-a's twice: the last wins
        ]
        await sink.write(batch)
        target: Any = await cosmos.container(container, "/drawer")
        found = {(d["drawer"], d["id"]): d["v"] async for d in target.query_items("SELECT * FROM c")}
        assert found == {("drawer-a", "0000000000000001"): 2, ("drawer-b", "0000000000000001"): 1}
    finally:
        await sink.close()
