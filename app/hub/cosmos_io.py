"""The Cosmos DB adapter of the hub's document store (HubStore, app/hub/ports.py).

Only what both real Cosmos DB and the embedded endpoint support: point CRUD, replace with
If-Match, partition-scoped queries. `execute_item_batch` is used as a bulk create only (the
embedded endpoint does not make it atomic): a failed batch falls back to single creates where
409 (already there) counts as done, so the outcome is the same under both semantics.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from azure.core import MatchConditions
from azure.cosmos import exceptions
from azure.cosmos.aio import ContainerProxy

from app.cosmos.failures import cosmos_failure
from app.errors import ConfigError, ServiceUnavailable
from app.hub.model import CabinetKey, Ledger
from app.hub.ports import AllPages, BatchedCreates, RequestCounter

__all__ = ["HubContainers"]


@contextlib.contextmanager
def _answered(what: str, container: ContainerProxy) -> Iterator[None]:
    """An error answer of Cosmos DB to `what` on `container` as its typed error (503 or 502)."""
    try:
        yield
    except exceptions.CosmosHttpResponseError as exc:
        raise cosmos_failure(exc, f"{what} on {container.id}") from exc


@dataclass
class HubContainers(AllPages[ContainerProxy], BatchedCreates[ContainerProxy]):
    """HubStore[ContainerProxy]: the hub's containers on Cosmos DB, with request counting."""

    event_shards: Sequence[ContainerProxy]  # pk: drawer id; a cabinet's drawers spread over them
    drawers: ContainerProxy  # pk: cabinet key
    catalog: ContainerProxy  # pk: recipient|domain
    ledgers: ContainerProxy  # pk: recipient
    ids: ContainerProxy  # pk: recipient (idempotency index, one document per saved event id)
    counter: RequestCounter = field(default_factory=RequestCounter)
    write_gate: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))

    def events(self, ledger: Ledger, cabinet: CabinetKey, ordinal: int) -> ContainerProxy:
        """The container holding the events of a drawer (the `ordinal`-th of its cabinet)."""
        if ledger.containers > len(self.event_shards):
            raise ConfigError(
                f"the events of {ledger.recipient} spread over {ledger.containers} event containers,"
                f" but only {len(self.event_shards)} are configured: HUB_EVENT_CONTAINERS must never shrink"
            )
        return self.event_shards[ledger.drawer_container(cabinet, ordinal)]

    def new_ledger(self, recipient: str) -> Ledger:
        return Ledger(recipient, containers=len(self.event_shards))

    async def pages(
        self,
        container: ContainerProxy,
        sql: str,
        partition_key: str,
        params: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[list[dict[str, Any]]]:
        parameters = [{"name": name, "value": value} for name, value in (params or {}).items()]
        pager = container.query_items(
            sql, parameters=parameters, partition_key=partition_key, max_item_count=page_size
        ).by_page()
        with _answered("a query", container):
            async for page in pager:
                self.counter.add()
                yield [doc async for doc in page]

    async def read_all(self, container: ContainerProxy) -> AsyncIterator[dict[str, Any]]:
        with _answered("a read feed", container):
            async for page in container.read_all_items(max_item_count=1000).by_page():
                self.counter.add()
                async for doc in page:
                    yield doc

    async def read(self, container: ContainerProxy, doc_id: str, partition_key: str) -> dict[str, Any] | None:
        self.counter.add()
        with _answered("a read", container):
            try:
                doc: dict[str, Any] = await container.read_item(doc_id, partition_key=partition_key)
            except exceptions.CosmosResourceNotFoundError:
                return None
        return doc

    async def create(self, container: ContainerProxy, doc: dict[str, Any]) -> bool:
        """Create `doc`; False when a document with its id already exists."""
        return await self.create_tagged(container, doc) is not None

    async def create_tagged(self, container: ContainerProxy, doc: dict[str, Any]) -> str | None:
        """Create `doc`; its etag, or None when a document with its id already exists."""
        self.counter.add()
        with _answered("a create", container):
            try:
                created: dict[str, Any] = await container.create_item(doc)
            except exceptions.CosmosResourceExistsError:
                return None
        return str(created["_etag"])

    async def replace_if_match(self, container: ContainerProxy, doc: dict[str, Any], etag: str) -> bool:
        """Replace under If-Match; False on a stale etag (412) or a vanished document."""
        return await self.replace_tagged(container, doc, etag) is not None

    async def replace_tagged(self, container: ContainerProxy, doc: dict[str, Any], etag: str) -> str | None:
        """Replace under If-Match; the new etag, or None on a stale etag (412) or a vanished document."""
        self.counter.add()
        with _answered("a replace", container):
            try:
                replaced: dict[str, Any] = await container.replace_item(
                    doc["id"], doc, etag=etag, match_condition=MatchConditions.IfNotModified
                )
            except exceptions.CosmosAccessConditionFailedError:
                self.counter.etag_conflicts += 1
                return None
            except exceptions.CosmosResourceNotFoundError:
                return None
        return str(replaced["_etag"])

    async def delete_if_match(
        self, container: ContainerProxy, doc_id: str, partition_key: str, etag: str
    ) -> bool:
        """Delete under If-Match; False on a stale etag (412) or a vanished document."""
        self.counter.add()
        with _answered("a delete", container):
            try:
                await container.delete_item(
                    doc_id,
                    partition_key=partition_key,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
            except exceptions.CosmosAccessConditionFailedError:
                self.counter.etag_conflicts += 1
                return False
            except exceptions.CosmosResourceNotFoundError:
                return False
        return True

    async def delete(self, container: ContainerProxy, doc_id: str, partition_key: str) -> None:
        self.counter.add()
        with _answered("a delete", container), contextlib.suppress(exceptions.CosmosResourceNotFoundError):
            await container.delete_item(doc_id, partition_key=partition_key)

    async def batch_create(
        self, container: ContainerProxy, partition_key: str, docs: Sequence[dict[str, Any]]
    ) -> bool:
        """One batch of creates; False when it failed on a document that already exists."""
        async with self.write_gate:
            self.counter.add()
            try:
                await container.execute_item_batch(
                    [("create", (doc,)) for doc in docs], partition_key=partition_key
                )
            except exceptions.CosmosBatchOperationError as exc:
                if any(r.get("statusCode") == 409 for r in exc.operation_responses or ()):
                    return False
                raise ServiceUnavailable(f"Cosmos batch on {container.id} failed: {exc.status_code}") from exc
            except exceptions.CosmosHttpResponseError as exc:
                raise cosmos_failure(exc, f"a batch on {container.id}") from exc
        return True
