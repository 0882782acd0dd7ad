"""Message hub reclaim bench: what a drained recipient leaves on the Cosmos endpoint, what the sweep
costs against the raw client deleting the same documents, and a ledger of many voided claims.

Part 1: one recipient saves N events (drawers of HUB_DRAWER_CAPACITY), its actor drains them
(peek + dequeue), and the reclaim sweep runs: documents per drained event before and after the
sweep, and after the dedup window (the index's expiry, as the sweep does it on the embedded
endpoint). Baseline: the same number of documents created and then deleted with the raw SDK
client (single deletes, as many in flight as the sweep uses), in the same run.

Part 2: a recipient whose ledger holds V voided ranges (as V crashed saves between good ones leave
it) against a fresh recipient: the time to save and peek 100 events, before and after a sweep.

    .venv/bin/python -m bench.hub_reclaim [--events 20000] [--drawer-capacity 1000] [--voids 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

from azure.cosmos.aio import ContainerProxy

from app.cosmos import CosmosStore, open_cosmos
from app.dataavailable import DataAvailable
from app.hub import HubContainers, MessageHub
from app.hub.documents import ledger_doc
from app.hub.model import Ledger
from app.hub.reclaim import DELETES_IN_FLIGHT
from app.settings import get_settings
from bench.cleanup import drop_bench_database

CONNECTION_TIMEOUT_S = 120


class Clock:
    """The hub's clock for claims and the dedup window, moved by the bench (no waiting)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def new_events(actor: str, n: int) -> list[DataAvailable]:
    return [DataAvailable(str(uuid.uuid4()), actor, "timeseries", "E66", 1024) for _ in range(n)]


async def count(container: ContainerProxy) -> int:
    return sum([1 async for _ in container.read_all_items(max_item_count=1000)])


async def stored(io: HubContainers) -> dict[str, int]:
    events = sum([await count(c) for c in io.event_shards])
    return {"events": events, "drawers": await count(io.drawers), "index": await count(io.ids)}


async def drain(hub: MessageHub, actor: str) -> int:
    drained = 0
    while (bundle := await hub.peek(actor)) is not None:
        drained += len(bundle.events)
        await hub.dequeue(actor, bundle.bundle_id)
    return drained


async def raw_deletes(store: CosmosStore, n: int) -> float:
    """The baseline: n documents deleted one request each, DELETES_IN_FLIGHT at once."""
    container = await store.container("bench-raw-deletes", "/pk")
    docs = [{"id": str(i), "pk": f"p{i % 10}", "pad": "x" * 300} for i in range(n)]
    for start in range(0, n, 100):
        chunk = docs[start : start + 100]
        by_pk: dict[str, list[dict[str, Any]]] = {}
        for doc in chunk:
            by_pk.setdefault(doc["pk"], []).append(doc)
        await asyncio.gather(
            *(
                container.execute_item_batch([("create", (d,)) for d in group], partition_key=pk)
                for pk, group in by_pk.items()
            )
        )
    gate = asyncio.Semaphore(DELETES_IN_FLIGHT)

    async def delete(doc: dict[str, Any]) -> None:
        async with gate:
            await container.delete_item(doc["id"], partition_key=doc["pk"])

    started = time.perf_counter()
    await asyncio.gather(*(delete(d) for d in docs))
    return time.perf_counter() - started


async def part_reclaim(hub: MessageHub, store: CosmosStore, n_events: int, clock: Clock) -> dict[str, Any]:
    io = hub.repository.io
    assert isinstance(io, HubContainers)
    actor = "5790000000001"
    await hub.save(new_events(actor, n_events))
    assert await drain(hub, actor) == n_events
    before = await stored(io)
    started = time.perf_counter()
    report = await hub.reclaim()
    sweep_s = time.perf_counter() - started
    after = await stored(io)
    clock.now = time.time() + hub.repository.options.dedup_window_s + 1
    await hub.reclaim()
    expired = await stored(io)
    raw_s = await raw_deletes(store, report.documents)
    per = {k: round(sum(v.values()) / n_events, 4) for k, v in (("before", before), ("after", after))}
    per["after_window"] = round(sum(expired.values()) / n_events, 4)
    print(f"stored    before sweep {before}, after {after}, after the dedup window {expired}")
    print(f"per event {per['before']} -> {per['after']} -> {per['after_window']} documents (target <= 0.05)")
    print(
        f"sweep     {report.documents} documents in {sweep_s:.2f} s ({report.requests} requests);"
        f" raw deletes of as many: {raw_s:.2f} s; ratio {sweep_s / raw_s:.2f}x"
    )
    return {
        "events": n_events,
        "documents_per_event_before": per["before"],
        "documents_per_event_after": per["after"],
        "documents_per_event_after_window": per["after_window"],
        "sweep_s": round(sweep_s, 3),
        "raw_delete_s": round(raw_s, 3),
        "sweep_over_raw": round(sweep_s / raw_s, 3),
    }


async def save_and_peek(hub: MessageHub, actor: str) -> float:
    started = time.perf_counter()
    await hub.save(new_events(actor, 100))
    bundle = await hub.peek(actor)
    assert bundle is not None and len(bundle.events) == 100
    await hub.dequeue(actor, bundle.bundle_id)
    return time.perf_counter() - started


async def part_voids(hub: MessageHub, n_voids: int) -> dict[str, Any]:
    io = hub.repository.io
    fresh, voided = "5790000000002", "5790000000003"
    ledger = Ledger(
        voided,
        next_seq=2 * n_voids + 1,
        voids=tuple((2 * k + 1, 2 * k + 1, 0.0) for k in range(n_voids)),
        containers=len(io.event_shards) if isinstance(io, HubContainers) else 1,
    )
    size = len(json.dumps(ledger_doc(ledger)))
    await io.create(io.ledgers, ledger_doc(ledger))
    await save_and_peek(hub, fresh)  # warm-up: the actors' bundle streams exist
    await save_and_peek(hub, voided)
    fresh_s = await save_and_peek(hub, fresh)
    voided_s = await save_and_peek(hub, voided)
    started = time.perf_counter()
    report = await hub.reclaim()
    sweep_s = time.perf_counter() - started
    swept_s = await save_and_peek(hub, voided)
    print(
        f"voids     ledger of {n_voids:,} voided ranges ({size:,} bytes): save+peek+dequeue of 100"
        f" {voided_s:.3f} s vs fresh {fresh_s:.3f} s; swept in {sweep_s:.2f} s"
        f" ({report.voids} ranges dropped), then {swept_s:.3f} s"
    )
    return {
        "voids": n_voids,
        "voided_ledger_bytes": size,
        "fresh_s": round(fresh_s, 3),
        "voided_s": round(voided_s, 3),
        "voided_over_fresh": round(voided_s / fresh_s, 3),
        "after_sweep_s": round(swept_s, 3),
        "after_sweep_over_fresh": round(swept_s / fresh_s, 3),
    }


async def run(n_events: int, capacity: int, n_voids: int) -> dict[str, Any]:
    settings = get_settings().model_copy(update={"hub_drawer_capacity": capacity})
    store = await open_cosmos(
        settings, f"bench-reclaim-{uuid.uuid4().hex[:8]}", connection_timeout=CONNECTION_TIMEOUT_S
    )
    hub = await MessageHub.open(settings, store=store)
    clock = Clock(time.time())
    original = hub.repository.ledgers.now
    hub.repository.ledgers.now = clock.time  # type: ignore[method-assign]  # the dedup window passes
    try:
        figures = await part_reclaim(hub, store, n_events, clock)
        clock.now = time.time()
        hub.repository.ledgers.now = original  # type: ignore[method-assign]
        figures.update(await part_voids(hub, n_voids))
        return figures
    finally:
        await hub.close()
        await drop_bench_database(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--drawer-capacity", type=int, default=1_000)
    parser.add_argument("--voids", type=int, default=100_000)
    args = parser.parse_args()
    figures = asyncio.run(run(args.events, args.drawer_capacity, args.voids))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
