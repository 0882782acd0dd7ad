"""The in-memory HubStore keeps the Cosmos adapter's rules: etags, If-Match, create conflicts,
batches, and exactly the query shapes the hub issues."""

from __future__ import annotations

from typing import Any

import pytest

from app.hub.documents import EVENT_FIELDS
from app.hub.memory import MemoryHubStore, Request, UnsupportedQuery, parse_query
from app.hub.model import CabinetKey, Ledger


def doc(doc_id: str, pk: str = "p", **fields: object) -> dict[str, object]:
    return {"id": doc_id, "pk": pk, **fields}


async def test_every_write_changes_the_etag_and_if_match_refuses_a_stale_one() -> None:
    store = MemoryHubStore()
    first = await store.create_tagged(store.ledgers, doc("a", n=1))
    assert first is not None
    assert await store.create_tagged(store.ledgers, doc("a", n=9)) is None  # 409: already there
    second = await store.replace_tagged(store.ledgers, doc("a", n=2), first)
    assert second is not None and second != first
    assert await store.replace_tagged(store.ledgers, doc("a", n=3), first) is None  # 412: stale
    assert not await store.delete_if_match(store.ledgers, "a", "p", first)
    assert store.counter.etag_conflicts == 2
    stored = await store.read(store.ledgers, "a", "p")
    assert stored is not None and stored["n"] == 2 and stored["_etag"] == second
    assert await store.delete_if_match(store.ledgers, "a", "p", second)
    assert await store.read(store.ledgers, "a", "p") is None
    assert await store.replace_tagged(store.ledgers, doc("a"), second) is None  # 404: vanished
    await store.delete(store.ledgers, "a", "p")  # not there: no error


async def test_documents_are_copied_in_and_out_and_kept_per_partition() -> None:
    store = MemoryHubStore()
    body = doc("a", "p1", n=[1])
    assert await store.create(store.ids, body)
    body["n"].append(2)  # type: ignore[attr-defined]
    read = await store.read(store.ids, "a", "p1")
    assert read is not None and read["n"] == [1]
    read["n"].append(3)
    again = await store.read(store.ids, "a", "p1")
    assert again is not None and again["n"] == [1]
    assert await store.read(store.ids, "a", "p2") is None
    assert await store.create(store.ids, doc("a", "p2"))  # same id, other partition


@pytest.mark.parametrize("atomic", [True, False])
async def test_a_batch_meeting_an_existing_id_fails_atomically_or_keeps_its_prefix(atomic: bool) -> None:
    store = MemoryHubStore(atomic_batches=atomic)
    assert await store.create(store.ids, doc("c"))
    assert not await store.create_all_new(store.ids, "p", [doc("a"), doc("b"), doc("c"), doc("d")])
    kept = {d["id"] for d in store.ids.documents()}
    assert kept == ({"c"} if atomic else {"a", "b", "c"})
    await store.bulk_create(store.ids, "p", [doc("a"), doc("b"), doc("c"), doc("d")])  # finishes it
    assert {d["id"] for d in store.ids.documents()} == {"a", "b", "c", "d"}


async def test_bulk_creates_go_in_batches_of_a_hundred() -> None:
    seen: list[Request] = []

    async def record(request: Request) -> None:
        seen.append(request)

    store = MemoryHubStore(before=record)
    assert await store.create_all_new(store.ids, "p", [doc(str(i)) for i in range(250)])
    assert sorted(len(r.ids) for r in seen if r.op == "batch") == [50, 100, 100]
    with pytest.raises(ValueError, match="partition"):
        await store.create_all_new(store.ids, "p", [doc("x", "other")])


async def test_hooks_fail_a_write_before_it_or_lose_its_answer_after_it() -> None:
    async def refuse(request: Request) -> None:
        if request.is_write:
            raise ConnectionError("before")

    store = MemoryHubStore(before=refuse)
    with pytest.raises(ConnectionError):
        await store.create(store.catalog, doc("a"))
    assert store.catalog.documents() == []

    async def lose(request: Request) -> None:
        raise ConnectionError("after")

    store = MemoryHubStore(after=lose)
    with pytest.raises(ConnectionError):
        await store.create(store.catalog, doc("a"))
    assert [d["id"] for d in store.catalog.documents()] == ["a"]


async def test_the_queries_the_hub_issues() -> None:
    store = MemoryHubStore()
    for seq in (3, 1, 2, 5):
        await store.create(store.event_shards[0], doc(f"{seq:016d}", "d", seq=seq, eid=f"e{seq}"))
    events = store.event_shards[0]
    ordered = (
        f"SELECT {EVENT_FIELDS} FROM c WHERE c.pk = @pk AND c.seq > @after AND c.seq <= @upto ORDER BY c.seq"
    )
    pages = [
        page async for page in store.pages(events, ordered, "d", {"@pk": "d", "@after": 1, "@upto": 5}, 2)
    ]
    assert pages == [[{"seq": 2, "eid": "e2"}, {"seq": 3, "eid": "e3"}], [{"seq": 5, "eid": "e5"}]]
    top = "SELECT TOP 2 c.seq FROM c WHERE c.pk = @pk AND c.seq > @after ORDER BY c.seq"
    assert await store.query(events, top, "d", {"@pk": "d", "@after": 1}) == [{"seq": 2}, {"seq": 3}]
    values = "SELECT VALUE c.seq FROM c WHERE c.pk = @pk AND c.seq > @after"
    seqs: list[Any] = await store.query(events, values, "d", {"@pk": "d", "@after": 2})  # VALUE: ints
    assert sorted(seqs) == [3, 5]

    await store.create(store.drawers, doc("open", "cab", **{"from": 4}))
    await store.create(store.drawers, doc("empty", "cab", **{"from": None}))
    await store.create(store.drawers, doc("later", "cab", **{"from": 9}))
    open_sql = 'SELECT * FROM c WHERE c.pk = @pk AND IS_NUMBER(c["from"]) AND c["from"] <= @fence'
    found = await store.query(store.drawers, open_sql, "cab", {"@pk": "cab", "@fence": 5})
    assert [d["id"] for d in found] == ["open"] and "_etag" in found[0]
    everything = await store.query(store.drawers, "SELECT * FROM c WHERE c.pk = @pk", "cab", {"@pk": "cab"})
    assert {d["id"] for d in everything} == {"open", "empty", "later"}
    assert await store.query(store.drawers, "SELECT * FROM c WHERE c.pk = @pk", "none", {"@pk": "none"}) == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM c",
        "SELECT * FROM c WHERE c.pk = @pk OR c.seq > @x",
        "SELECT COUNT(1) FROM c WHERE c.pk = @pk",
        "SELECT * FROM c WHERE c.pk = @pk ORDER BY c.seq DESC",
        "SELECT * FROM c WHERE STARTSWITH(c.id, @p)",
    ],
)
def test_any_other_query_is_refused_by_name(sql: str) -> None:
    with pytest.raises(UnsupportedQuery, match="not support"):
        parse_query(sql)


async def test_event_containers_as_the_adapter_maps_them() -> None:
    store = MemoryHubStore(event_containers=3)
    ledger = store.new_ledger("r")
    cabinet = CabinetKey("r", "d", "mt")
    assert ledger.containers == 3
    used = {store.events(ledger, cabinet, ordinal).id for ordinal in range(3)}
    assert used == {"events", "events-1", "events-2"}
    with pytest.raises(Exception, match="must never shrink"):
        store.events(Ledger("r", containers=4), cabinet, 0)
