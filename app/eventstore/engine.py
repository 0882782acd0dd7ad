"""The event store engine: load (tip, unfolds, cache), decide, and sync with optimistic retries.

Pure of any database: it reads and writes through a StreamStorage port. A sync writes the calved
batch (deterministic id) first and then replaces the tip with If-Match on the etag it loaded, so
the tip replace is the single commit point. On WriteConflict it reads what changed since its
version, folds it in, decides again, and gives up after ``max_sync_attempts`` with SyncConflict.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.eventstore.access import (
    AccessStrategy,
    RollingState,
    Snapshot,
    Unoptimized,
    check_strategy,
    check_ttl,
    folds_stored_events_on,
    origin_predicate,
    transmute,
)
from app.eventstore.cache import Cache, CacheEntry
from app.eventstore.codec import Codec
from app.eventstore.decider import Decider
from app.eventstore.errors import EventStoreConfigError, SyncConflict, UnknownEventCase
from app.eventstore.lifecycle import delete_stream, prune_stream
from app.eventstore.model import (
    EncodedEvent,
    EncodedUnfold,
    TipDocument,
    check_stream_name,
    plan_write,
)
from app.eventstore.ports import NOT_MODIFIED, StreamStorage, WriteConflict
from app.waiting import after_conflict

__all__ = ["CategoryStore", "EventStore", "Loaded", "StoreOptions"]

log = logging.getLogger(__name__)

C = TypeVar("C")
S = TypeVar("S")
E = TypeVar("E")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Loaded(Generic[S]):
    """A stream's state at ``version`` (its next event index) and the tip etag it was read at."""

    state: S
    version: int
    etag: str | None


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Tuning of the tip and the sync loop."""

    max_events_in_tip: int = 10
    max_tip_json_bytes: int = 30_000
    max_sync_attempts: int = 16
    compress_unfolds_min_bytes: int = 256
    retry_backoff_max_s: float = 0.05

    def __post_init__(self) -> None:
        if self.max_events_in_tip < 1 or self.max_sync_attempts < 1 or self.max_tip_json_bytes < 1:
            raise EventStoreConfigError(
                "max_events_in_tip, max_tip_json_bytes, max_sync_attempts must be >= 1"
            )


class EventStore:
    """Streams kept through one StreamStorage (see app.eventstore.cosmos for the Cosmos one)."""

    def __init__(self, storage: StreamStorage, options: StoreOptions | None = None) -> None:
        self.storage = storage
        self.options = options or StoreOptions()

    def category(
        self,
        name: str,
        decider: Decider[C, S, E],
        codec: Codec[E],
        access: AccessStrategy | None = None,
        cache: Cache | None = None,
        *,
        ttl_s: int | None = None,
    ) -> CategoryStore[C, S, E]:
        """`ttl_s`: the category's streams expire that long after their last write (Cosmos DB's
        per-item TTL; a calved batch that long after it was calved). Not for Unoptimized access,
        whose loads need every batch."""
        return CategoryStore(self, name, decider, codec, access or Snapshot(), cache, ttl_s)


class CategoryStore(Generic[C, S, E]):
    """Load, query and transact the streams of one category."""

    def __init__(
        self,
        store: EventStore,
        name: str,
        decider: Decider[C, S, E],
        codec: Codec[E],
        access: AccessStrategy,
        cache: Cache | None,
        ttl_s: int | None = None,
    ) -> None:
        check_strategy(access, decider)
        check_ttl(ttl_s, access)
        self.ttl_s = ttl_s
        self.name = name
        self.decider = decider
        self.codec = codec
        self.access = access
        self._storage = store.storage
        self._options = store.options
        self._cache = cache
        self._is_origin = origin_predicate(access, decider)
        self._loading: dict[str, asyncio.Future[CacheEntry]] = {}  # loads in flight, by stream

    # -- public API ---------------------------------------------------------------------------

    async def load(self, stream: str, *, allow_stale_s: float = 0.0) -> Loaded[S]:
        """The current state; with ``allow_stale_s`` a cached state that young skips the read."""
        entry = await self._load_cached(check_stream_name(stream), allow_stale_s)
        return Loaded(entry.state, entry.version, entry.etag)

    async def query(self, stream: str, render: Callable[[S], T], *, allow_stale_s: float = 0.0) -> T:
        return render((await self.load(stream, allow_stale_s=allow_stale_s)).state)

    async def transact(
        self, stream: str, command: C, *, assume_cached: bool = False, meta: Mapping[str, Any] | None = None
    ) -> Loaded[S]:
        """Run ``decider.decide(command, state)`` and append its events; the resulting state.

        With ``assume_cached`` a cached state is decided on without reading the tip first (the
        If-Match write still catches a stale state and retries): one request less per append
        for streams with one writer, but a decision with no events is not checked against the
        store. ``meta`` (a correlation id, who decided) is stored with each event appended (``m``).
        """

        def decision(state: S) -> tuple[None, Sequence[E]]:
            return None, self.decider.decide(command, state)

        _, entry = await self._sync(check_stream_name(stream), decision, assume_cached, meta)
        return Loaded(entry.state, entry.version, entry.etag)

    async def decide(
        self,
        stream: str,
        decision: Callable[[S], tuple[R, Sequence[E]]],
        *,
        assume_cached: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> R:
        """Run ``decision(state) -> (result, events)``, append the events (each with ``meta``)
        and return the result."""
        result, _ = await self._sync(check_stream_name(stream), decision, assume_cached, meta)
        return result

    async def read_events(self, stream: str) -> list[tuple[int, E]]:
        """Every stored event with its index, oldest first (an audit read: one query)."""
        stream = check_stream_name(stream)
        tip = await self._storage.read_tip(stream, None)
        if tip is None or tip is NOT_MODIFIED:
            return []
        out: list[tuple[int, E]] = []
        async for page in self._storage.iter_batches(stream, 0, tip.index, descending=False):
            for batch in page:
                out.extend(self._indexed(batch.index, batch.events))
        out.extend(self._indexed(tip.index, tip.events))
        return out

    def _indexed(self, first: int, events: Sequence[EncodedEvent]) -> list[tuple[int, E]]:
        """(index, event) of stored events; with the codec's skip_unknown, less unknown ones."""
        return [
            (first + k, self.codec.decode(e))
            for k, e in enumerate(events)
            if not (self.codec.skip_unknown and not self.codec.knows(e.case))
        ]

    async def prune(self, stream: str, before_index: int) -> int:
        """Delete the stored events before `before_index`, never the tip's (lifecycle.py); how many."""
        return await prune_stream(self._storage, check_stream_name(stream), before_index)

    async def delete(self, stream: str) -> int:
        """Delete the stream, batches first and its tip last (lifecycle.py); how many events went."""
        stream = check_stream_name(stream)
        try:
            return await delete_stream(self._storage, stream)
        finally:
            if self._cache is not None:
                self._cache.invalidate(self.name, stream)

    # -- loading ------------------------------------------------------------------------------

    async def _load_cached(self, stream: str, allow_stale_s: float) -> CacheEntry:
        """A load; one that allows staleness (Equinox's AllowStale) shares a load of the stream
        already in flight instead of reading again. A load without it always reads: a load begun
        earlier may have read the tip before a write that ended before this call."""
        cached = self._cache.get(self.name, stream) if self._cache is not None else None
        if cached is not None and allow_stale_s > 0 and self._now() - cached.stored_at_s <= allow_stale_s:
            return cached
        running = self._loading.get(stream)
        if running is not None and allow_stale_s > 0:
            return await asyncio.shield(running)
        loading: asyncio.Future[CacheEntry] = asyncio.get_running_loop().create_future()
        self._loading[stream] = loading
        try:
            entry = await self._load(stream, cached)
        except BaseException as exc:
            loading.set_exception(exc)
            loading.exception()  # retrieved: a failed load nobody shared logs nothing
            raise
        finally:
            if self._loading.get(stream) is loading:
                del self._loading[stream]
        loading.set_result(entry)
        if self._cache is not None:
            self._cache.put_loaded(self.name, stream, entry, cached)
        return entry

    def _now(self) -> float:
        return self._cache.now_s() if self._cache is not None else 0.0

    def _entry(self, state: S, version: int, tip: TipDocument | None) -> CacheEntry:
        return CacheEntry(state, version, tip.etag if tip else None, tip, self._now())

    async def _load(self, stream: str, prior: CacheEntry | None) -> CacheEntry:
        tip = await self._storage.read_tip(stream, prior.etag if prior else None)
        if tip is NOT_MODIFIED:
            assert prior is not None
            return self._entry(prior.state, prior.version, prior.tip)
        if tip is None:
            return self._entry(self.decider.initial, 0, None)
        self._check_cases(tip)
        if prior is not None and prior.etag == tip.etag:
            # The embedded endpoint answers the body where real Cosmos answers 304: fold nothing.
            return self._entry(prior.state, prior.version, tip)
        if prior is not None and folds_stored_events_on(self.access) and prior.tip is not None:
            if tip.index <= prior.version <= tip.next_index:
                since = tip.events[prior.version - tip.index :]
                state = self.decider.fold(prior.state, self.codec.decode_all(since))
                return self._entry(state, tip.next_index, tip)
            if isinstance(self.access, Unoptimized) and prior.version < tip.index:
                return await self._fold_forward(stream, prior.state, prior.version, tip)
        return await self._reconstruct(stream, tip)

    def _check_cases(self, tip: TipDocument) -> None:
        """Refuse a tip holding an event this codec cannot read, even when the cache spares its
        decoding: a write would otherwise carry it forward in a tip this writer cannot fold."""
        if self.codec.skip_unknown:  # the codec folds past them (and a write carries them on as stored)
            return
        for offset, event in enumerate(tip.events):
            if not self.codec.knows(event.case):
                raise UnknownEventCase(
                    f"stream {tip.stream!r} event {tip.index + offset}: unknown case {event.case!r}; "
                    f"this codec knows {self.codec.cases}"
                )

    async def _fold_forward(self, stream: str, state: S, from_index: int, tip: TipDocument) -> CacheEntry:
        async for page in self._storage.iter_batches(stream, from_index, tip.index, descending=False):
            for batch in page:
                skip = max(0, from_index - batch.index)
                state = self.decider.fold(state, self.codec.decode_all(batch.events[skip:]))
        state = self.decider.fold(state, self.codec.decode_all(tip.events))
        return self._entry(state, tip.next_index, tip)

    def _unfold_groups(self, tip: TipDocument) -> list[tuple[int, list[E]]]:
        """The tip's unfold groups (the version each was taken at, its events), newest first; a
        group this codec cannot decode (another schema version's) is left out: unfolds are only
        an optimisation."""
        groups: list[tuple[int, list[E]]] = []
        for index in sorted({u.index for u in tip.unfolds}, reverse=True):
            try:
                groups.append((index, [self.codec.decode(u.event) for u in tip.unfolds if u.index == index]))
            except UnknownEventCase:
                log.warning("stream %s: ignoring unfolds at %d this codec cannot decode", tip.stream, index)
        return groups

    async def _reconstruct(self, stream: str, tip: TipDocument) -> CacheEntry:
        initial = self.decider.initial
        if isinstance(self.access, RollingState):  # the newest unfolds are the whole state
            latest = max((u.index for u in tip.unfolds), default=-1)
            unfolded = next((events for index, events in self._unfold_groups(tip) if index == latest), [])
            return self._entry(self.decider.fold(initial, unfolded), tip.next_index, tip)
        if isinstance(self.access, Unoptimized):
            return await self._fold_forward(stream, initial, 0, tip)
        tip_events = list(self.codec.decode_all(tip.events))
        for k in range(len(tip_events) - 1, -1, -1):
            if self._is_origin(tip_events[k]):
                return self._entry(self.decider.fold(initial, tip_events[k:]), tip.next_index, tip)
        # The seed's worked example: fold from any unfold group holding an origin, newest first
        # (`fold initial [S2 s4; C3 d5]` when S1 s5 is no origin but S2 s4 is), then the tip's
        # events since that group's version.
        for index, unfolded in self._unfold_groups(tip):
            if not tip.index <= index <= tip.next_index:
                continue
            for k in range(len(unfolded) - 1, -1, -1):
                if self._is_origin(unfolded[k]):
                    state = self.decider.fold(initial, unfolded[k:])
                    state = self.decider.fold(state, self.codec.decode_all(tip.events[index - tip.index :]))
                    return self._entry(state, tip.next_index, tip)
        return await self._fold_backward(stream, tip, tip_events)

    async def _fold_backward(self, stream: str, tip: TipDocument, tip_events: list[E]) -> CacheEntry:
        """Read batches newest first until an origin event; fold from there (or from initial)."""
        newer_first: list[E] = list(reversed(tip_events))
        found = False
        async for page in self._storage.iter_batches(stream, 0, tip.index, descending=True):
            for batch in page:
                for event in self.codec.decode_all(reversed(batch.events)):
                    newer_first.append(event)
                    if self._is_origin(event):
                        found = True
                        break
                if found:
                    break
            if found:
                break
        return self._entry(
            self.decider.fold(self.decider.initial, reversed(newer_first)), tip.next_index, tip
        )

    # -- syncing ------------------------------------------------------------------------------

    async def _sync(
        self,
        stream: str,
        decision: Callable[[S], tuple[R, Sequence[E]]],
        assume_cached: bool,
        meta: Mapping[str, Any] | None = None,
    ) -> tuple[R, CacheEntry]:
        current = await self._load_cached(stream, float("inf") if assume_cached else 0.0)
        attempts = self._options.max_sync_attempts
        for attempt in range(1, attempts + 1):
            result, decided = decision(current.state)
            events = list(decided)
            if not events:
                return result, current
            state = self.decider.fold(current.state, events)
            stored, unfolded = transmute(self.access, self.decider, events, state)
            encoded = [self.codec.encode(e, meta) for e in stored]
            version = current.version + len(encoded)
            unfolds = [EncodedUnfold(version, self.codec.encode(u)) for u in unfolded]
            try:
                tip = await self._write(stream, current, encoded, unfolds)
            except WriteConflict:
                expected = current.version
                current = await self._load(stream, current)
                log.info(
                    "stream %s: conflict at version=%d (now %d), attempt %d/%d",
                    stream, expected, current.version, attempt, attempts,
                )  # fmt: skip
                if attempt < attempts:
                    await after_conflict(attempt, attempts, self._options.retry_backoff_max_s)
                continue
            entry = self._entry(state, version, tip)
            if self._cache is not None:
                self._cache.put(self.name, stream, entry)
            return result, entry
        if self._cache is not None:
            self._cache.invalidate(self.name, stream)
        raise SyncConflict(
            f"stream {stream!r}: gave up after {attempts} attempts lost to concurrent writers; "
            f"last decided at version {current.version} (etag {current.etag})"
        )

    async def _write(
        self, stream: str, current: CacheEntry, events: list[Any], unfolds: list[EncodedUnfold]
    ) -> TipDocument:
        opts = self._options
        plan = plan_write(
            stream,
            current.tip,
            events,
            unfolds,
            rolling=isinstance(self.access, RollingState),
            max_events=opts.max_events_in_tip,
            max_json_bytes=opts.max_tip_json_bytes,
            ttl_s=self.ttl_s,
        )
        new_tip, calved = plan.tip, plan.calved
        if calved is not None:
            await self._storage.write_batch(calved)
        if current.tip is None:
            etag = await self._storage.create_tip(new_tip)
        else:
            assert current.tip.etag is not None, "a stored tip always has an etag"
            etag = await self._storage.replace_tip(new_tip, current.tip.etag)
        return TipDocument(new_tip.stream, new_tip.index, new_tip.events, new_tip.unfolds, etag)
