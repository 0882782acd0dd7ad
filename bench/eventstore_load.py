"""Load a 1,000-event stream with the Snapshot strategy vs Unoptimized (query every event).

Same run, same stream, same Cosmos endpoint. Requests are counted twice: by the store's own
response hook (RequestStats) and independently at the HTTP layer (an aiohttp trace on the
session the SDK uses), so SDK-internal requests are included. Two layouts of the same 1,000
decisions are measured:

- one event per batch document (max_events_in_tip=1): the baseline really queries every event;
- the default tip (max_events_in_tip=10): the baseline queries 100 batch documents.

Also: append latency (one decision = one transact) and a cached reload whose tip etag has not
changed. The embedded endpoint returns the tip body where real Cosmos answers 304 for 1 RU.

Run: .venv/bin/python bench/eventstore_load.py [--events 1000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from azure.core.pipeline.transport import AioHttpTransport

from app.cosmos import CosmosStore, open_cosmos
from app.eventstore import Cache, Codec, Decider, Snapshot, StoreOptions, Unoptimized, open_event_store
from app.settings import get_settings


@dataclass(frozen=True)
class BundlePeeked:
    bundle_id: str
    event_ids: tuple[str, ...]


@dataclass(frozen=True)
class BundleDequeued:
    bundle_id: str


@dataclass(frozen=True)
class BundlesSnapshot:
    open_bundle: str | None
    event_ids: tuple[str, ...]
    dequeued: int


Event = BundlePeeked | BundleDequeued | BundlesSnapshot


def evolve(state: BundlesSnapshot, event: Event) -> BundlesSnapshot:
    if isinstance(event, BundlesSnapshot):
        return event
    if isinstance(event, BundlePeeked):
        return BundlesSnapshot(event.bundle_id, event.event_ids, state.dequeued)
    if event.bundle_id == state.open_bundle:
        return BundlesSnapshot(None, (), state.dequeued + 1)
    return state


def decide(command: tuple[str, str], state: BundlesSnapshot) -> Sequence[Event]:
    verb, bundle = command
    if verb == "peek":
        return [] if state.open_bundle else [BundlePeeked(bundle, tuple(f"{bundle}-e{k}" for k in range(5)))]
    return [BundleDequeued(bundle)] if state.open_bundle == bundle else []


DECIDER: Decider[tuple[str, str], BundlesSnapshot, Event] = Decider(
    initial=BundlesSnapshot(None, (), 0),
    evolve=evolve,
    decide=decide,
    unfold=lambda state: [state],
    is_origin=lambda event: isinstance(event, BundlesSnapshot),
)
CODEC: Codec[Event] = Codec(BundlePeeked, BundleDequeued, BundlesSnapshot)


class HttpCounter:
    def __init__(self) -> None:
        self.requests = 0

    async def on_request_start(self, *_: Any) -> None:
        self.requests += 1


async def open_counted(counter: HttpCounter) -> tuple[CosmosStore, aiohttp.ClientSession]:
    settings = get_settings()
    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(counter.on_request_start)
    session = aiohttp.ClientSession(trace_configs=[trace])
    store = await open_cosmos(
        settings,
        f"bench-es-{uuid.uuid4().hex[:8]}",
        transport=AioHttpTransport(session=session, session_owner=False),
    )
    return store, session


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure_layout(
    cosmos: CosmosStore, counter: HttpCounter, max_events_in_tip: int, events: int, repeats: int
) -> dict[str, Any]:
    store = await open_event_store(
        cosmos,
        container=f"bench-{max_events_in_tip}",
        options=StoreOptions(max_events_in_tip=max_events_in_tip),
    )
    stream = f"Bundle-{uuid.uuid4().hex[:8]}"
    writer = store.category("Bundle", DECIDER, CODEC, Snapshot(), Cache())
    # First half: read the tip then write (default); second half: assume_cached (write only).
    append_ms: dict[bool, list[float]] = {False: [], True: []}
    append_http: dict[bool, int] = {False: 0, True: 0}
    for k in range(events // 2):
        assume = k >= events // 4
        for verb in ("peek", "dequeue"):
            http_before, started = counter.requests, time.perf_counter()
            await writer.transact(stream, (verb, f"b{k}"), assume_cached=assume)
            append_ms[assume].append((time.perf_counter() - started) * 1000)
            append_http[assume] += counter.requests - http_before
    expected = DECIDER.fold(DECIDER.initial, [e for _, e in await writer.read_events(stream)])

    results: dict[str, Any] = {}
    for label, access in (("unoptimized", Unoptimized()), ("snapshot", Snapshot())):
        times_ms, requests, hooked = [], [], []
        for _ in range(repeats):
            reader = store.category("Bundle", DECIDER, CODEC, access)  # no cache: a cold reader
            store.stats.reset()
            http_before = counter.requests
            started = time.perf_counter()
            loaded = await reader.load(stream)
            times_ms.append((time.perf_counter() - started) * 1000)
            requests.append(counter.requests - http_before)
            hooked.append(store.stats.requests)
            assert loaded.state == expected and loaded.version == events, (label, loaded)
        results[label] = {
            "load_ms_median": statistics.median(times_ms),
            "http_requests": max(requests),
            "store_counted_requests": max(hooked),
        }
    cached = store.category("Bundle", DECIDER, CODEC, Snapshot(), Cache())
    await cached.load(stream)
    http_before, started = counter.requests, time.perf_counter()
    await cached.load(stream)
    results["snapshot_cached_unchanged"] = {
        "load_ms": (time.perf_counter() - started) * 1000,
        "http_requests": counter.requests - http_before,
    }
    un, sn = results["unoptimized"], results["snapshot"]
    for assume, key in ((False, "append"), (True, "append_assume_cached")):
        results[key] = {
            "p50_ms": pct(append_ms[assume], 0.5),
            "p95_ms": pct(append_ms[assume], 0.95),
            "http_requests_per_append": round(append_http[assume] / len(append_ms[assume]), 2),
        }
    results["request_ratio"] = un["http_requests"] / sn["http_requests"]
    results["speedup"] = un["load_ms_median"] / sn["load_ms_median"]
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    counter = HttpCounter()
    cosmos, session = await open_counted(counter)
    figures: dict[str, Any] = {"events": args.events}
    try:
        for name, max_events in (("one_event_per_document", 1), ("default_tip_10_events", 10)):
            r = await measure_layout(cosmos, counter, max_events, args.events, args.repeats)
            figures[name] = r
            un, sn = r["unoptimized"], r["snapshot"]
            print(f"\n== {args.events}-event stream, layout {name} (max_events_in_tip={max_events}) ==")
            for title, row in (("Unoptimized (query every event)", un), ("Snapshot (tip point read)", sn)):
                print(f"  {title:32s} {row['load_ms_median']:8.1f} ms  {row['http_requests']:4d} requests")
            print(f"  ratio: {r['request_ratio']:.0f}x fewer requests, {r['speedup']:.1f}x faster")
            c = r["snapshot_cached_unchanged"]
            print(
                f"  Snapshot, cached and tip unchanged: {c['load_ms']:.1f} ms "
                f"{c['http_requests']} request, 0 events folded"
            )
            for key in ("append", "append_assume_cached"):
                a = r[key]
                print(
                    f"  {key:21s}: p50 {a['p50_ms']:.1f} ms  p95 {a['p95_ms']:.1f} ms  "
                    f"{a['http_requests_per_append']} requests/append"
                )
    finally:
        await cosmos.client.delete_database(cosmos.database.id)
        await cosmos.close()
        await session.close()
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
