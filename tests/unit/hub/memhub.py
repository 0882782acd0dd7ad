"""Hubs over the in-memory store for unit tests: workers sharing one store, draining, forcing writes to
fail and writers to interleave."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from app.dataavailable import DataAvailable
from app.eventstore import Cache, EventStore, MemoryStreamStorage, Snapshot, StoreOptions
from app.eventstore.model import TipDocument
from app.eventstore.ports import NotModified
from app.hub import HubRepository, MemoryHubStore, MessageHub, PeekedBundle, RepositoryOptions
from app.hub.bundle_stream import CATEGORY, EventStoreBundleLog, bundles_codec, bundles_decider
from app.hub.memory import Op, Request

MB = 1024 * 1024
RECIPIENT = "5790000000005"
# Small drawers and pages, so a few events span several drawers and pages.
OPTIONS = RepositoryOptions(drawer_capacity=3, parallel_drawers=2, page_size=2, lease_s=60.0)

WRITER: ContextVar[str] = ContextVar("writer", default="")  # who issues a request (set per task)


class Injected(Exception):
    """A write failed on purpose (the request never reached the store, or its answer was lost)."""


def event(
    name: str, *, domain: str = "timeseries", message_type: str = "mt", weight: int = 20 * MB
) -> DataAvailable:
    """An event with an id derived from `name` (20 MB by default: two to a bundle)."""
    return DataAvailable(str(uuid.uuid5(uuid.NAMESPACE_OID, name)), RECIPIENT, domain, message_type, weight)


def events(prefix: str, n: int, **kwargs: Any) -> list[DataAvailable]:
    return [event(f"{prefix}{i}", **kwargs) for i in range(n)]


class HookedStreams(MemoryStreamStorage):
    """Bundle streams whose tip reads and writes pass the hub store's hooks (as container
    "streams"): a test counts, fails and interleaves them with the store's requests."""

    def __init__(self, store: MemoryHubStore) -> None:
        super().__init__()
        self.store = store

    async def _hooked(self, op: Op, stream: str, call: Callable[[], Awaitable[Any]]) -> Any:
        request = Request(op, "streams", stream)
        if self.store.before is not None:
            await self.store.before(request)
        answer = await call()
        if self.store.after is not None and request.is_write:
            await self.store.after(request)
        return answer

    async def read_tip(self, stream: str, known_etag: str | None) -> TipDocument | NotModified | None:
        found: TipDocument | NotModified | None = await self._hooked(
            "read", stream, partial(super().read_tip, stream, known_etag)
        )
        return found

    async def create_tip(self, tip: TipDocument) -> str:
        created: str = await self._hooked("create", tip.stream, partial(super().create_tip, tip))
        return created

    async def replace_tip(self, tip: TipDocument, expected_etag: str) -> str:
        replaced: str = await self._hooked(
            "replace", tip.stream, partial(super().replace_tip, tip, expected_etag)
        )
        return replaced


@dataclass
class World:
    """One hub store and one bundle-stream store, shared by any number of workers (processes)."""

    store: MemoryHubStore = field(default_factory=MemoryHubStore)
    streams: MemoryStreamStorage = field(default_factory=MemoryStreamStorage)
    options: RepositoryOptions = OPTIONS

    @classmethod
    def with_hooked_streams(cls) -> World:
        """A world whose bundle-stream requests pass the store's hooks too."""
        store = MemoryHubStore()
        return cls(store, HookedStreams(store))

    def fail_write(self, nth: int, *, lose_answer: bool = False) -> None:
        """Fail the store's `nth` write from now on: before it reaches the store, or after it took
        effect (its answer lost)."""
        hook = fail_write(nth, lose_answer=lose_answer)
        if lose_answer:
            self.store.after = hook
        else:
            self.store.before = hook

    def repository(self) -> HubRepository[Any]:
        return HubRepository(self.store, self.options)

    def worker(self, repository: HubRepository[Any] | None = None) -> MessageHub:
        """A MessageHub as one worker process opens it: its own caches over the shared stores."""
        category = EventStore(self.streams, StoreOptions(max_events_in_tip=10)).category(
            CATEGORY, bundles_decider, bundles_codec, access=Snapshot(), cache=Cache(max_entries=100)
        )
        return MessageHub(repository or self.repository(), EventStoreBundleLog(category))


async def drain(hub: MessageHub, actor: str = RECIPIENT, limit: int = 200) -> list[PeekedBundle]:
    """Peek and dequeue until nothing is left; the bundles in the order they came."""
    bundles: list[PeekedBundle] = []
    for _ in range(limit):
        bundle = await hub.peek(actor)
        if bundle is None:
            return bundles
        bundles.append(bundle)
        await hub.dequeue(actor, bundle.bundle_id)
    raise AssertionError(f"still not drained after {limit} bundles")


def ids_of(bundles: Sequence[PeekedBundle]) -> list[str]:
    return [s.event.id for b in bundles for s in b.events]


def ids(items: Sequence[DataAvailable]) -> list[str]:
    return [e.id for e in items]


def in_order(drained: Sequence[str], wanted: Sequence[str]) -> bool:
    """Whether `wanted` appears in `drained` in this order (not necessarily together)."""
    position = {event_id: i for i, event_id in enumerate(drained)}
    at = [position[e] for e in wanted]
    return at == sorted(at)


def fail_write(
    nth: int, *, lose_answer: bool = False, writer: str | None = None
) -> Callable[[Request], Awaitable[None]]:
    """A hook failing the `nth` write (of `writer`'s requests, or of anyone's): before it reaches the
    store (pass it as `before`), or after it took effect (`lose_answer`, pass it as `after`)."""
    seen = 0

    async def hook(request: Request) -> None:
        nonlocal seen
        if not request.is_write or (writer is not None and WRITER.get() != writer):
            return
        seen += 1
        if seen == nth:
            where = "answer lost" if lose_answer else "not written"
            raise Injected(f"write {nth} ({request.op} on {request.container}) {where}")

    return hook


def recorder(into: list[Request]) -> Callable[[Request], Awaitable[None]]:
    async def hook(request: Request) -> None:
        into.append(request)

    return hook


def kinds(requests: list[Request]) -> list[tuple[str, str]]:
    return [(r.op, r.container.split("-")[0]) for r in requests]


def count_writes(into: list[Request]) -> Callable[[Request], Awaitable[None]]:
    async def hook(request: Request) -> None:
        if request.is_write:
            into.append(request)

    return hook


class Preemption:
    """Writer A runs; writer B's requests before its `j`-th run just before A's `i`-th request, and
    B's rest just before A's `i2`-th (i <= i2). Counting every store request (reads, query pages and
    writes) from the start of each writer. A point beyond a writer's last request means "after it"."""

    def __init__(self, i: int, j: int, i2: int) -> None:
        assert 1 <= i <= i2 and j >= 1
        self.i, self.j, self.i2 = i, j, i2
        self.counts = {"A": 0, "B": 0}
        self.trace: list[str] = []
        self.b_go = asyncio.Event()
        self.b_stopped = asyncio.Event()
        self.b_resume = asyncio.Event()
        self.b_done = asyncio.Event()

    async def before(self, request: Request) -> None:
        who = WRITER.get()
        if who not in self.counts:
            return
        self.counts[who] += 1
        n = self.counts[who]
        if who == "A":
            if n >= self.i:
                self.b_go.set()
                await self.b_stopped.wait()
            if n >= self.i2:
                self.b_resume.set()
                await self.b_done.wait()
        else:
            await self.b_go.wait()
            if n >= self.j:
                self.b_stopped.set()
                await self.b_resume.wait()
        self.trace.append(f"{who}:{request.op}:{request.container}")

    async def run(self, a: Callable[[], Awaitable[Any]], b: Callable[[], Awaitable[Any]]) -> list[Any]:
        """Run both; their results or exceptions."""

        async def writer_a() -> Any:
            WRITER.set("A")
            try:
                return await a()
            finally:
                self.b_go.set()
                self.b_resume.set()

        async def writer_b() -> Any:
            WRITER.set("B")
            try:
                return await b()
            finally:
                self.b_stopped.set()
                self.b_done.set()

        return list(await asyncio.gather(writer_a(), writer_b(), return_exceptions=True))
