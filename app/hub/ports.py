"""Ports the hub depends on; adapters implement them.

`HubStore` is the document store under the drawers, cabinets and catalog: point reads, creates,
replaces and deletes under If-Match, partition-scoped queries and bulk creates, on five kinds of
container (events, drawers, catalog, ledgers, ids). Containers are opaque handles of the adapter's
own type `C` (azure `ContainerProxy` for Cosmos DB, `MemoryContainer` in memory); documents are JSON
dicts carrying their etag as `_etag`. A lost race is a return value, never an exception:
`None`/`False` for "already exists" (409), "etag stale" (412) and "not found" (404). Any other
failure of the store is `ServiceUnavailable` (retriable).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from app.hub.actor import ActorBundles, ActorEvent
from app.hub.model import CabinetKey, Ledger
from app.waiting import gather_all

__all__ = ["BATCH_LIMIT", "AllPages", "BatchedCreates", "BundleLog", "HubStore", "RequestCounter"]

R = TypeVar("R")
C = TypeVar("C")

BATCH_LIMIT = 100  # documents per batch of a bulk create (Cosmos DB's limit of operations per batch)


class BundleLog(Protocol):
    """The per-actor stream of bundle events (event store), folded into ActorBundles."""

    async def load(self, actor: str, *, allow_stale_s: float = 0.0) -> ActorBundles:
        """The actor's bundles; with `allow_stale_s`, what this process loaded or wrote that
        recently, without a read."""
        ...

    async def decide(
        self, actor: str, decision: Callable[[ActorBundles], tuple[R, Sequence[ActorEvent]]]
    ) -> R:
        """Run `decision` on the current state and append its events; re-run it on a version conflict."""
        ...

    async def close(self) -> None: ...

    @property
    def requests(self) -> int:
        """Cosmos requests issued so far (for benchmarks)."""
        ...


@dataclass
class RequestCounter:
    """Store requests issued (query pages count one each); the bench reads it."""

    total: int = 0
    etag_conflicts: int = 0  # If-Match replaces refused (412): a concurrent writer won, we retried

    def add(self, n: int = 1) -> None:
        self.total += n


class HubStore(Protocol[C]):
    """The hub's documents, in containers of handle type `C`; every partition key is the `pk` field."""

    drawers: C  # pk: cabinet key
    catalog: C  # pk: recipient|domain
    ledgers: C  # pk: recipient
    ids: C  # pk: recipient (idempotency index, one document per saved event id)
    counter: RequestCounter

    def events(self, ledger: Ledger, cabinet: CabinetKey, ordinal: int) -> C:
        """The container holding the events of a drawer (the `ordinal`-th of its cabinet); pk: drawer id."""
        ...

    def new_ledger(self, recipient: str) -> Ledger:
        """The ledger of a recipient's first save (its events spread over every event container)."""
        ...

    async def read(self, container: C, doc_id: str, partition_key: str) -> dict[str, Any] | None:
        """The document, None when there is none."""
        ...

    async def query(
        self,
        container: C,
        sql: str,
        partition_key: str,
        params: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> list[dict[str, Any]]:
        """Every result of a query scoped to one partition (all its pages)."""
        ...

    def pages(
        self,
        container: C,
        sql: str,
        partition_key: str,
        params: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The results of a query scoped to one partition, a page (one request) at a time, lazily."""
        ...

    async def create(self, container: C, doc: dict[str, Any]) -> bool:
        """Create `doc`; False when a document with its id already exists."""
        ...

    async def create_tagged(self, container: C, doc: dict[str, Any]) -> str | None:
        """Create `doc`; its etag, or None when a document with its id already exists."""
        ...

    async def replace_if_match(self, container: C, doc: dict[str, Any], etag: str) -> bool:
        """Replace under If-Match; False on a stale etag or a vanished document."""
        ...

    async def replace_tagged(self, container: C, doc: dict[str, Any], etag: str) -> str | None:
        """Replace under If-Match; the new etag, or None on a stale etag or a vanished document."""
        ...

    async def delete_if_match(self, container: C, doc_id: str, partition_key: str, etag: str) -> bool:
        """Delete under If-Match; False on a stale etag or a vanished document."""
        ...

    async def delete(self, container: C, doc_id: str, partition_key: str) -> None:
        """Delete; a document that is not there is no error."""
        ...

    async def bulk_create(self, container: C, partition_key: str, docs: Sequence[dict[str, Any]]) -> None:
        """Create documents of one partition in batches of BATCH_LIMIT; ones already there count as
        created (a retry after a partial write finishes it)."""
        ...

    def read_all(self, container: C) -> AsyncIterator[dict[str, Any]]:
        """Every document of a container (a read feed over all partitions: for sweeps and
        operators' summaries, never a request path)."""
        ...

    async def create_all_new(self, container: C, partition_key: str, docs: Sequence[dict[str, Any]]) -> bool:
        """Create documents of one partition in batches of BATCH_LIMIT; False when any already existed.

        After False, some of `docs` may have been created (a batch is atomic on real Cosmos DB, not
        on the embedded endpoint; other batches of the call are independent)."""
        ...


class AllPages(Generic[C]):
    """`HubStore.query` for a store that has `pages`: every page's results, one request a page."""

    def pages(
        self,
        container: C,
        sql: str,
        partition_key: str,
        params: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[list[dict[str, Any]]]:
        raise NotImplementedError

    async def query(
        self,
        container: C,
        sql: str,
        partition_key: str,
        params: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> list[dict[str, Any]]:
        return [
            doc async for page in self.pages(container, sql, partition_key, params, page_size) for doc in page
        ]


class BatchedCreates(Generic[C]):
    """`HubStore.bulk_create` and `create_all_new` for a store that has `batch_create` (one batch
    of at most BATCH_LIMIT creates in one partition) and `create`: the adapter and the in-memory
    fake split and finish bulks the same way."""

    async def batch_create(self, container: C, partition_key: str, docs: Sequence[dict[str, Any]]) -> bool:
        """One batch of creates; False when it met a document that already exists."""
        raise NotImplementedError

    async def create(self, container: C, doc: dict[str, Any]) -> bool:
        raise NotImplementedError

    async def bulk_create(self, container: C, partition_key: str, docs: Sequence[dict[str, Any]]) -> None:
        await gather_all(*(self._create_chunk(container, partition_key, c) for c in _chunks(docs)))

    async def _create_chunk(self, container: C, partition_key: str, docs: Sequence[dict[str, Any]]) -> None:
        if await self.batch_create(container, partition_key, docs):
            return
        for doc in docs:  # a retry after a partial write: finish one by one, 409 means already there
            await self.create(container, doc)

    async def create_all_new(self, container: C, partition_key: str, docs: Sequence[dict[str, Any]]) -> bool:
        created = await gather_all(*(self.batch_create(container, partition_key, c) for c in _chunks(docs)))
        return all(created)


def _chunks(docs: Sequence[dict[str, Any]]) -> list[Sequence[dict[str, Any]]]:
    return [docs[i : i + BATCH_LIMIT] for i in range(0, len(docs), BATCH_LIMIT)]
