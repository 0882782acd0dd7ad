"""Change capture from a Cosmos DB container's change feed (latest-version mode).

One continuation token per feed range is the reader state. Every entry of a page carries the token
from before its page and the page's last entry the token after it: a restart after only part of a
page reached the commit log reads that page again (duplicates, never a gap). Latest-version mode
shows each document once, at its latest version, and no deletes: mirror deletes by a soft-delete
field (and a TTL on the container), as Cosmos DB advises.

With `events: true` the container is an event store's: each entry is one event (stream, index,
case, data, meta, time; document key `<stream>/<index>`), in index order per stream
(`app.eventstore.feed`), optionally of one category only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from app.cosmos.client import CosmosStore, open_cosmos
from app.eventstore.errors import CorruptStream
from app.eventstore.feed import feed_events
from app.pipeline.errors import InvalidDefinition
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState
from app.pipeline.source_kit import now_ms
from app.settings import Settings

__all__ = ["CosmosFeedSource", "event_entries", "feed_entries", "range_key"]

log = logging.getLogger(__name__)

SYSTEM_FIELDS = frozenset({"_rid", "_self", "_etag", "_attachments", "_ts", "_lsn"})
RANGE_PREFIX = "feed:"


def range_key(feed_range: Mapping[str, Any]) -> str:
    """A feed range as a reader-state key (stable: sorted keys, compact JSON)."""
    return RANGE_PREFIX + orjson.dumps(feed_range, option=orjson.OPT_SORT_KEYS).decode()


def feed_entries(
    namespace: str, where: str, before: str | None, after: str, items: list[dict[str, Any]], id_field: str
) -> list[NewEntry]:
    """One page of the feed as entries: the page's last entry moves the range's token past the page."""
    entries = []
    for index, item in enumerate(items):
        token = after if index == len(items) - 1 else before
        data = {k: v for k, v in item.items() if k not in SYSTEM_FIELDS}
        ts = int(item.get("_ts") or 0) * 1000 or now_ms()
        entries.append(
            NewEntry(
                Message(Op.UPDATE, ts, namespace, data),
                Mode.SYNC,
                {where: token},
                str(item.get(id_field, "")),
            )
        )
    return entries


def event_entries(
    namespace: str,
    where: str,
    before: str | None,
    after: str,
    items: list[dict[str, Any]],
    category: str | None,
) -> list[NewEntry]:
    """One page of an event store's feed as one entry per event; the page's last entry moves the
    range's token past the page (a page without events of the category: a command entry that
    does). A document that does not parse is left out with a warning: the reader never stops on it."""
    entries = []
    for item in items:
        try:
            events = feed_events(item, category)
        except CorruptStream as exc:
            log.warning("%s: an event-store document left out of the feed: %s", namespace, exc)
            continue
        ts = int(item.get("_ts") or 0) * 1000 or now_ms()
        entries += [
            NewEntry(Message(Op.INSERT, ts, namespace, e.as_dict()), Mode.SYNC, {where: before}, e.key)
            for e in events
        ]
    if not entries:
        return [
            NewEntry(Message(Op.COMMAND, now_ms(), namespace, {"feed": "page"}), Mode.SYNC, {where: after})
        ]
    entries[-1].position = {where: after}
    return entries


class CosmosFeedSource:
    """Every change of one container, from the beginning (default) or from now, without end (with
    `until_caught_up`, until a round over the feed finds nothing new)."""

    until_caught_up = False

    def __init__(self, settings: Settings, options: Mapping[str, Any], batch_size: int) -> None:
        self.settings = settings
        self.container_name = str(options["container"])
        self.database = str(options.get("database") or settings.cosmos_database)
        self.namespace = str(options.get("namespace") or self.container_name)
        self.id_field = str(options.get("id_field", "id"))
        start = str(options.get("start", "beginning"))
        if start not in ("beginning", "now"):
            raise InvalidDefinition(f"reader.start: 'beginning' or 'now', got {start!r}")
        self.start_time = "Beginning" if start == "beginning" else "Now"
        self.poll_s = float(options.get("poll_s", 1.0))
        # A soft-delete flag: a document whose field is truthy reaches the writers as a delete.
        self.deleted_field = str(options["deleted_field"]) if options.get("deleted_field") else None
        self.events = bool(options.get("events", False))
        self.category = str(options["category"]) if options.get("category") and self.events else None
        self.batch_size = batch_size
        self._store: CosmosStore | None = None

    async def _container(self) -> Any:
        if self._store is None:
            self._store = await open_cosmos(self.settings, self.database)
        return self._store.database.get_container_client(self.container_name)

    async def _ranges(self, container: Any, stored: Mapping[str, Any]) -> dict[str, Any]:
        """Feed ranges to read: the stored ones (their tokens follow splits), else the container's."""
        keys = [k for k in stored if k.startswith(RANGE_PREFIX)]
        if keys:
            return {k: orjson.loads(k[len(RANGE_PREFIX) :]) for k in keys}
        return {range_key(r): r async for r in container.read_feed_ranges()}

    async def _pages(self, container: Any, feed_range: Any, token: str | None) -> AsyncIterator[Any]:
        if token is None:
            pager = container.query_items_change_feed(
                feed_range=feed_range, start_time=self.start_time, max_item_count=self.batch_size
            )
        else:
            pager = container.query_items_change_feed(continuation=token, max_item_count=self.batch_size)
        async for page in pager.by_page():
            yield [item async for item in page]

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        container = await self._container()
        tokens: dict[str, str | None] = dict(resume.get(self.namespace, ReaderState()).position)
        ranges = await self._ranges(container, tokens)
        while True:
            idle = True
            for where, feed_range in ranges.items():
                async for items in self._pages(container, feed_range, tokens.get(where)):
                    before, after = tokens.get(where), self._etag(container)
                    if items and after:
                        idle = False
                        tokens[where] = after
                        yield self._entries(where, before, after, items)
                if tokens.get(where) is None and self._etag(container):
                    # Pin where "now" (or an empty container) began, so that a restart resumes there.
                    tokens[where] = self._etag(container)
                    pinned = Message(Op.COMMAND, now_ms(), self.namespace, {"feed": "started"})
                    yield [NewEntry(pinned, Mode.SYNC, {where: tokens[where]})]
            if idle:
                if self.until_caught_up:  # a round over every range found nothing new
                    return
                await asyncio.sleep(self.poll_s)

    @staticmethod
    def _etag(container: Any) -> str | None:
        """The continuation after the last page read (the change feed's etag)."""
        etag = container.client_connection.last_response_headers.get("etag")
        return str(etag) if etag else None

    def _entries(
        self, where: str, before: str | None, after: str, items: list[dict[str, Any]]
    ) -> list[NewEntry]:
        if self.events:
            return event_entries(self.namespace, where, before, after, items, self.category)
        entries = feed_entries(self.namespace, where, before, after, items, self.id_field)
        if self.deleted_field:
            for entry, item in zip(entries, items, strict=True):
                if item.get(self.deleted_field):
                    entry.message.op = Op.DELETE
        return entries

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
