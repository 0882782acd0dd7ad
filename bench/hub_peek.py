"""Message hub bench: Save, Peek and Dequeue of a 51,200-event bundle vs a bare read of the same documents.

One recipient, 51,200 DataAvailable events of 1 KB weight (exactly 50 MB: one full bundle) in
drawers of HUB_DRAWER_CAPACITY (default here 10,000, so 6 drawers), on the configured Cosmos
endpoint (embedded by default), in a fresh database that is deleted afterwards.

Baseline: the same 51,200 event documents read with plain partition queries (one per drawer,
all drawers concurrently, same page size), no catalog, ledger, ordering or bundle logic.

    .venv/bin/python -m bench.hub_peek [--events 51200] [--drawer-capacity 10000] [--page-size 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

from app.cosmos import open_cosmos
from app.dataavailable import DataAvailable
from app.hub import MessageHub
from app.hub.model import CabinetKey, DrawerState
from app.settings import get_settings
from bench.cleanup import drop_bench_database

CONNECTION_TIMEOUT_S = 120


async def bare_read(
    hub: MessageHub, actor: str, drawers: list[DrawerState], page_size: int
) -> tuple[int, float, int]:
    ledger, _ = await hub.repository.ledgers.read(actor)

    async def read(drawer: DrawerState) -> tuple[int, int]:
        drawer_id = drawer.drawer_id
        container = hub.repository.io.events(ledger, drawer.cabinet, drawer.ordinal)
        pages = container.query_items(
            "SELECT * FROM c WHERE c.pk = @pk",
            parameters=[{"name": "@pk", "value": drawer_id}],
            partition_key=drawer_id,
            max_item_count=page_size,
        ).by_page()
        docs = requests = 0
        async for page in pages:
            requests += 1
            docs += len([d async for d in page])
        return docs, requests

    started = time.perf_counter()
    results = await asyncio.gather(*(read(d) for d in drawers))
    return sum(r[0] for r in results), time.perf_counter() - started, sum(r[1] for r in results)


async def measure_peek(hub: MessageHub, actor: str) -> tuple[Any, float, int]:
    before = hub.requests
    started = time.perf_counter()
    bundle = await hub.peek(actor, ("timeseries",))
    return bundle, time.perf_counter() - started, hub.requests - before


async def run(n_events: int, capacity: int, page_size: int) -> dict[str, Any]:
    settings = get_settings().model_copy(
        update={"hub_drawer_capacity": capacity, "hub_read_page_size": page_size}
    )
    # Own client with a long connection timeout: the shared embedded endpoint is a single Node
    # process that stops accepting connections while it scans a large container for a query page.
    store = await open_cosmos(
        settings, f"bench-hub-{uuid.uuid4().hex[:8]}", connection_timeout=CONNECTION_TIMEOUT_S
    )
    hub = await MessageHub.open(settings, store=store)
    try:
        actor = "5790000000001"
        # Warm-up: the actor's bundle stream exists (steady state; a brand-new actor's first peek
        # pays the event store's first tip read on top, ~0.5 s on the embedded endpoint).
        await hub.save([DataAvailable(str(uuid.uuid4()), actor, "timeseries", "warm-up", 1024)])
        warm = await hub.peek(actor, ("timeseries",))
        assert warm is not None
        await hub.dequeue(actor, warm.bundle_id)
        events = [DataAvailable(str(uuid.uuid4()), actor, "timeseries", "E66", 1024) for _ in range(n_events)]
        started = time.perf_counter()
        saved = await hub.save(events)
        save_s = time.perf_counter() - started
        assert saved.saved == n_events, saved
        save_rate = n_events / save_s
        print(f"save      {n_events} events in {save_s:.2f} s = {save_rate:,.0f} events/s")

        ledger, _ = await hub.repository.ledgers.read(actor)
        cabinet = next(c for c in ledger_cabinets(ledger) if c.message_type == "E66")
        drawers = [d for d, _ in await hub.repository.peeks._open_drawers(cabinet)]
        drawer_ids = [d.drawer_id for d in drawers]
        page_size = settings.hub_read_page_size

        docs, bare_s, bare_requests = await bare_read(hub, actor, drawers, page_size)
        print(
            f"bare read {docs} documents from {len(drawer_ids)} drawers in {bare_s:.2f} s"
            f" ({bare_requests} requests)"
        )

        bundle, peek_s, peek_requests = await measure_peek(hub, actor)
        assert bundle is not None and len(bundle.events) == n_events, "the bundle should hold every event"
        assert [s.event.id for s in bundle.events] == [e.id for e in events], "FIFO order broken"
        ratio = peek_s / bare_s
        print(f"peek      {len(bundle.events)} events in {peek_s:.2f} s, {peek_requests} Cosmos requests")
        print(f"ratio     peek / bare read = {ratio:.2f}x (target <= 1.1x; peek < 30 s)")

        again, repeek_s, repeek_requests = await measure_peek(hub, actor)
        assert again is not None and again.bundle_id == bundle.bundle_id
        print(f"re-peek   same bundle in {repeek_s:.2f} s, {repeek_requests} requests")

        before = hub.requests
        started = time.perf_counter()
        await hub.dequeue(actor, bundle.bundle_id)
        dequeue_ms = (time.perf_counter() - started) * 1000
        dequeue_requests = hub.requests - before
        print(f"dequeue   {dequeue_ms:.1f} ms, {dequeue_requests} requests (target <= 20 ms)")
        assert await hub.peek(actor) is None

        small = await small_peek_requests(hub, actor)
        print(
            f"requests  per peek: {peek_requests} for {n_events} events/{len(drawer_ids)} drawers/"
            f"{bare_requests} pages; {small} for 10 events/1 drawer/1 page"
        )
        return {
            "events": n_events,
            "page_size": page_size,
            "drawers": len(drawer_ids),
            "save_s": round(save_s, 3),
            "save_events_per_s": round(save_rate),
            "bare_read_s": round(bare_s, 3),
            "peek_s": round(peek_s, 3),
            "peek_over_bare": round(ratio, 3),
            "repeek_s": round(repeek_s, 3),
            "dequeue_ms": round(dequeue_ms, 1),
            "peek_requests": peek_requests,
            "bare_read_requests": bare_requests,
            "small_peek_requests": small,
            "dequeue_requests": dequeue_requests,
        }
    finally:
        await hub.close()
        await drop_bench_database(store)


def ledger_cabinets(ledger: Any) -> list[Any]:
    return [CabinetKey(*value.split("|", 2)) for value in ledger.heads]


async def small_peek_requests(hub: MessageHub, actor: str) -> int:
    await hub.save([DataAvailable(str(uuid.uuid4()), actor, "timeseries", "E66", 1024) for _ in range(10)])
    _, _, requests = await measure_peek(hub, actor)
    return requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=51_200)
    parser.add_argument("--drawer-capacity", type=int, default=10_000)
    # The embedded endpoint filters the whole container for every query page, so fewer, larger
    # pages are much cheaper there; peek and the bare read use the same page size.
    parser.add_argument("--page-size", type=int, default=10_000)
    args = parser.parse_args()
    figures = asyncio.run(run(args.events, args.drawer_capacity, args.page_size))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
