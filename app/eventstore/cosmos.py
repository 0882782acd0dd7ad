"""The Cosmos DB adapter: a StreamStorage over one container partitioned by ``/p`` (the stream).

Every request passes a ``raw_response_hook`` that counts it (and its RU charge) in RequestStats,
so callers and the benchmark see what a load or a sync cost.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.core.pipeline import PipelineResponse
from azure.cosmos import exceptions
from azure.cosmos.aio import ContainerProxy

from app.cosmos import CosmosStore
from app.crashpoints import crash_point
from app.eventstore.engine import EventStore, StoreOptions
from app.eventstore.errors import StoreUnavailable
from app.eventstore.model import TIP_ID, BatchDocument, TipDocument, parse_batch, parse_tip
from app.eventstore.ports import NOT_MODIFIED, NotModified, WriteConflict

__all__ = ["CosmosEventStore", "CosmosStreamStorage", "RequestStats", "open_event_store"]

log = logging.getLogger(__name__)

PARTITION_KEY_PATH = "/p"
# Equinox's recommended policy: the stream, index and next index are queried; event and unfold
# bodies never are, so they are not indexed (cheaper writes, less storage).
INDEXING_POLICY: dict[str, Any] = {
    "indexingMode": "consistent",
    "automatic": True,
    "includedPaths": [{"path": "/*"}],
    "excludedPaths": [{"path": "/e/*"}, {"path": "/u/*"}, {"path": '/"_etag"/?'}],
}
_BATCHES_QUERY = "SELECT * FROM c WHERE c.p = @p AND c.i < @below AND c.n > @from ORDER BY c.i {order}"


@dataclass
class RequestStats:
    """Requests sent to Cosmos and the request units they were charged."""

    requests: int = 0
    request_charge_ru: float = 0.0

    def hook(self, response: PipelineResponse[Any, Any]) -> None:
        self.requests += 1
        charge = response.http_response.headers.get("x-ms-request-charge")
        if charge:
            with contextlib.suppress(ValueError):
                self.request_charge_ru += float(charge)

    def reset(self) -> None:
        self.requests, self.request_charge_ru = 0, 0.0


def _unavailable(stream: str, action: str, exc: exceptions.CosmosHttpResponseError) -> StoreUnavailable:
    return StoreUnavailable(f"stream {stream!r}: {action} failed with Cosmos status {exc.status_code}")


class CosmosStreamStorage:
    """Tip point reads, partition-scoped batch queries, create/replace with If-Match."""

    def __init__(
        self,
        container: ContainerProxy,
        *,
        query_max_items: int = 10,
        compress_unfolds_min_bytes: int = 256,
        stats: RequestStats | None = None,
    ) -> None:
        self.container = container
        self.query_max_items = query_max_items
        self.compress_unfolds_min_bytes = compress_unfolds_min_bytes
        self.stats = stats or RequestStats()

    async def read_tip(self, stream: str, known_etag: str | None) -> TipDocument | NotModified | None:
        conditions: dict[str, Any] = {}
        if known_etag is not None:
            # Real Cosmos answers 304 (1 RU, no body); the embedded endpoint returns the body.
            conditions = {"etag": known_etag, "match_condition": MatchConditions.IfModified}
        statuses: list[int] = []

        def hook(response: PipelineResponse[Any, Any]) -> None:
            self.stats.hook(response)
            statuses.append(response.http_response.status_code)

        try:
            body: dict[str, Any] = await self.container.read_item(
                TIP_ID, partition_key=stream, raw_response_hook=hook, **conditions
            )
        except exceptions.CosmosResourceNotFoundError:
            return None
        except exceptions.CosmosHttpResponseError as exc:
            if exc.status_code == 304:
                return NOT_MODIFIED
            raise _unavailable(stream, "reading the tip", exc) from exc
        # The SDK answers a 304 with an empty body, not an exception.
        if statuses and statuses[-1] == 304:
            return NOT_MODIFIED
        return parse_tip(body, stream)

    async def iter_batches(
        self, stream: str, from_index: int, below_index: int, *, descending: bool
    ) -> AsyncIterator[Sequence[BatchDocument]]:
        if below_index <= from_index:
            return
        query = _BATCHES_QUERY.format(order="DESC" if descending else "ASC")
        parameters: list[dict[str, Any]] = [
            {"name": "@p", "value": stream},
            {"name": "@below", "value": below_index},
            {"name": "@from", "value": from_index},
        ]
        try:
            pages = self.container.query_items(
                query,
                parameters=parameters,
                partition_key=stream,
                max_item_count=self.query_max_items,
                raw_response_hook=self.stats.hook,
            ).by_page()
            async for page in pages:
                yield [parse_batch(doc, stream) async for doc in page]
        except exceptions.CosmosHttpResponseError as exc:
            raise _unavailable(stream, "querying batches", exc) from exc

    async def create_tip(self, tip: TipDocument) -> str:
        crash_point("eventstore.tip.create")
        try:
            body = await self.container.create_item(
                tip.to_json(self.compress_unfolds_min_bytes), raw_response_hook=self.stats.hook
            )
        except exceptions.CosmosResourceExistsError as exc:
            raise WriteConflict(tip.stream) from exc
        except exceptions.CosmosHttpResponseError as exc:
            raise _unavailable(tip.stream, "creating the tip", exc) from exc
        return str(body["_etag"])

    async def replace_tip(self, tip: TipDocument, expected_etag: str) -> str:
        crash_point("eventstore.tip.replace")
        try:
            body = await self.container.replace_item(
                TIP_ID,
                tip.to_json(self.compress_unfolds_min_bytes),
                etag=expected_etag,
                match_condition=MatchConditions.IfNotModified,
                raw_response_hook=self.stats.hook,
            )
        except (exceptions.CosmosAccessConditionFailedError, exceptions.CosmosResourceNotFoundError) as exc:
            raise WriteConflict(tip.stream) from exc
        except exceptions.CosmosHttpResponseError as exc:
            raise _unavailable(tip.stream, "replacing the tip", exc) from exc
        return str(body["_etag"])

    async def delete_batch(self, stream: str, index: int) -> None:
        crash_point("eventstore.batch.delete")
        try:
            await self.container.delete_item(
                str(index), partition_key=stream, raw_response_hook=self.stats.hook
            )
        except exceptions.CosmosResourceNotFoundError:
            return
        except exceptions.CosmosHttpResponseError as exc:
            raise _unavailable(stream, f"deleting batch {index}", exc) from exc

    async def delete_tip(self, stream: str, expected_etag: str) -> None:
        crash_point("eventstore.tip.delete")
        try:
            await self.container.delete_item(
                TIP_ID,
                partition_key=stream,
                etag=expected_etag,
                match_condition=MatchConditions.IfNotModified,
                raw_response_hook=self.stats.hook,
            )
        except (exceptions.CosmosAccessConditionFailedError, exceptions.CosmosResourceNotFoundError) as exc:
            raise WriteConflict(stream) from exc
        except exceptions.CosmosHttpResponseError as exc:
            raise _unavailable(stream, "deleting the tip", exc) from exc

    async def write_batch(self, batch: BatchDocument) -> None:
        body = batch.to_json()
        crash_point("eventstore.batch.create")
        try:
            await self.container.create_item(body, raw_response_hook=self.stats.hook)
            return
        except exceptions.CosmosResourceExistsError:
            pass
        except exceptions.CosmosHttpResponseError as exc:
            raise _unavailable(batch.stream, f"writing batch {batch.index}", exc) from exc
        # A writer died (or lost the race) after calving at this index: grow it, never shrink it.
        try:
            existing = await self.container.read_item(
                str(batch.index), partition_key=batch.stream, raw_response_hook=self.stats.hook
            )
            existing_next = parse_batch(existing, batch.stream).next_index
            if existing_next > batch.next_index:
                raise WriteConflict(batch.stream)
            if existing_next == batch.next_index:
                return
            log.info(
                "stream %s: growing uncommitted batch %d to n=%d", batch.stream, batch.index, batch.next_index
            )
            crash_point("eventstore.batch.grow")
            await self.container.replace_item(
                str(batch.index),
                body,
                etag=existing["_etag"],
                match_condition=MatchConditions.IfNotModified,
                raw_response_hook=self.stats.hook,
            )
        except exceptions.CosmosAccessConditionFailedError as exc:
            raise WriteConflict(batch.stream) from exc
        except exceptions.CosmosHttpResponseError as exc:
            raise _unavailable(batch.stream, f"growing batch {batch.index}", exc) from exc


class CosmosEventStore(EventStore):
    """An EventStore over a Cosmos container; ``stats`` counts its requests."""

    def __init__(
        self, container: ContainerProxy, options: StoreOptions | None = None, *, query_max_items: int = 10
    ) -> None:
        options = options or StoreOptions()
        self.cosmos_storage = CosmosStreamStorage(
            container,
            query_max_items=query_max_items,
            compress_unfolds_min_bytes=options.compress_unfolds_min_bytes,
        )
        super().__init__(self.cosmos_storage, options)

    @property
    def stats(self) -> RequestStats:
        return self.cosmos_storage.stats


async def open_event_store(
    cosmos: CosmosStore,
    container: str = "events",
    options: StoreOptions | None = None,
    *,
    query_max_items: int = 10,
) -> CosmosEventStore:
    """The event store on ``container`` (created with partition key /p if missing, and per-item
    time to live on, so that categories given a TTL expire; documents without one never do)."""
    proxy = await cosmos.container(
        container, PARTITION_KEY_PATH, item_ttl=True, indexing_policy=INDEXING_POLICY
    )
    return CosmosEventStore(proxy, options, query_max_items=query_max_items)
