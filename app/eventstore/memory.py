"""An in-memory StreamStorage with the same conditional-write rules as the Cosmos adapter.

For unit tests of deciders and of code built on the event store; it stores the same JSON
documents (so corrupt bodies can be planted) and counts requests like the Cosmos adapter.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from app.eventstore.model import TIP_ID, BatchDocument, TipDocument, parse_batch, parse_tip
from app.eventstore.ports import NOT_MODIFIED, NotModified, WriteConflict

__all__ = ["MemoryStreamStorage"]


class MemoryStreamStorage:
    """Documents keyed by (stream, id); etags are a global counter."""

    def __init__(
        self,
        page_size: int = 10,
        compress_unfolds_min_bytes: int = 256,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.documents: dict[tuple[str, str], dict[str, Any]] = {}
        self.clock = clock
        self.requests = 0
        self.page_size = page_size
        self.compress_unfolds_min_bytes = compress_unfolds_min_bytes
        self._etags = itertools.count(1)

    async def _request(self) -> None:
        # Yield to the loop like a network round trip, so concurrent writers really interleave.
        self.requests += 1
        await asyncio.sleep(0)

    def _stamp(self, body: dict[str, Any]) -> str:
        etag = f'"{next(self._etags)}"'
        body["_etag"] = etag
        body["_ts"] = self.clock()  # when it was last written, as Cosmos DB keeps it
        return etag

    def expire_items(self) -> int:
        """What Cosmos DB does in the background: drop every document whose `ttl` has passed
        since its last write. Returns how many went."""
        now = self.clock()
        gone = [
            key for key, body in self.documents.items() if "ttl" in body and body["_ts"] + body["ttl"] <= now
        ]
        for key in gone:
            del self.documents[key]
        return len(gone)

    async def read_tip(self, stream: str, known_etag: str | None) -> TipDocument | NotModified | None:
        await self._request()
        body = self.documents.get((stream, TIP_ID))
        if body is None:
            return None
        if known_etag is not None and body.get("_etag") == known_etag:
            return NOT_MODIFIED
        return parse_tip(copy.deepcopy(body), stream)

    async def iter_batches(
        self, stream: str, from_index: int, below_index: int, *, descending: bool
    ) -> AsyncIterator[Sequence[BatchDocument]]:
        if below_index <= from_index:
            return
        docs = [
            body
            for (p, doc_id), body in self.documents.items()
            if p == stream
            and doc_id != TIP_ID
            and body.get("n", 0) > from_index
            and body.get("i", 0) < below_index
        ]
        docs.sort(key=lambda b: b.get("i", 0), reverse=descending)
        for start in range(0, max(len(docs), 1), self.page_size):
            await self._request()
            yield [parse_batch(copy.deepcopy(b), stream) for b in docs[start : start + self.page_size]]

    async def create_tip(self, tip: TipDocument) -> str:
        await self._request()
        key = (tip.stream, TIP_ID)
        if key in self.documents:
            raise WriteConflict(tip.stream)
        body = tip.to_json(self.compress_unfolds_min_bytes)
        self.documents[key] = body
        return self._stamp(body)

    async def replace_tip(self, tip: TipDocument, expected_etag: str) -> str:
        await self._request()
        key = (tip.stream, TIP_ID)
        current = self.documents.get(key)
        if current is None or current.get("_etag") != expected_etag:
            raise WriteConflict(tip.stream)
        body = tip.to_json(self.compress_unfolds_min_bytes)
        self.documents[key] = body
        return self._stamp(body)

    async def delete_batch(self, stream: str, index: int) -> None:
        await self._request()
        self.documents.pop((stream, str(index)), None)

    async def delete_tip(self, stream: str, expected_etag: str) -> None:
        await self._request()
        current = self.documents.get((stream, TIP_ID))
        if current is None or current.get("_etag") != expected_etag:
            raise WriteConflict(stream)
        del self.documents[(stream, TIP_ID)]

    async def write_batch(self, batch: BatchDocument) -> None:
        await self._request()
        key = (batch.stream, str(batch.index))
        existing = self.documents.get(key)
        if existing is not None:
            await self._request()
            if existing.get("n", 0) > batch.next_index:
                raise WriteConflict(batch.stream)
            if existing.get("n", 0) == batch.next_index:
                return
        body = batch.to_json()
        self.documents[key] = body
        self._stamp(body)
