"""Carlyle-compatible HTTP API as Faust views, each request served by the worker owning the batch.

A request for a batch in a partition this worker does not serve is forwarded (method, path, query,
body, Authorization) to the owner named by Faust's assignor, once: a forwarded request that
reaches a non-owner answers 503 (retriable) instead of bouncing. Requests naming several batches
(acks, decrements, bulk deletes) are split by owner.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from faust.web import View
from yarl import URL

from app.batch.api_models import (
    AckedItems,
    AckItems,
    AddedItems,
    AddItems,
    BatchCompletion,
    BatchStatus,
    Closed,
    Created,
    CreatedEstimated,
    CreateEstimated,
    CreateExact,
    Decremented,
    DecrEstimated,
    DeletedEstimated,
    EstimatedAck,
    EstimatedBatchView,
    EstimatedResult,
    ExactBatchView,
    ItemGroup,
    RefusedItem,
    Removed,
    estimated_view,
    exact_view,
)
from app.batch.errors import BatchNotFound, ItemNotFound, PartitionNotReady
from app.batch.estimated import check_count
from app.batch.exact import Removal
from app.batch.ids import GroupAcks, group_item_ids, item_ids_of, parse_estimated_id
from app.batch.request_params import IDEMPOTENCY_HEADER, _batch_id, _request_id, _since_ms
from app.batch.service import BatchService
from app.errors import InvalidInput
from app.web.models import ApiModel, Error, to_wire
from app.web.responses import (
    check_query,
    guarded,
    json_response,
    model_response,
    parse_body,
    read_json,
    require_admin,
)

__all__ = ["BatchApi", "register_views"]

ROUTED_HEADER = "X-Hubstream-Batch-Routed"
EXACT = "/api/v1/batch/exact"
ESTIMATED = "/api/v1/batch/estimated"


class BatchApi:
    def __init__(self, service: BatchService) -> None:
        self.service = service
        self.settings = service.settings

    # -- routing ---------------------------------------------------------------------------------

    def _is_self(self, url: str) -> bool:
        me, other = URL(str(self.service.app.conf.canonical_url)), URL(url)
        return (me.host, me.port) == (other.host, other.port)

    def _owner(self, request: web.Request, partition: int) -> str:
        """URL of the worker serving `partition`; PartitionNotReady when it is us (recovering) or unknown."""
        owner = self.service.owner_urls().get(partition)
        if request.headers.get(ROUTED_HEADER) or owner is None or self._is_self(owner):
            raise PartitionNotReady(
                f"batch table partition {partition} is recovering or being reassigned; retry"
            )
        return owner

    async def _forward(self, owner: str, request: web.Request, body: bytes | None) -> tuple[int, Any]:
        url = URL(owner).with_path(request.path).with_query(request.query)
        headers = {ROUTED_HEADER: "1", "Content-Type": "application/json"}
        for name in ("Authorization", IDEMPOTENCY_HEADER):
            if name in request.headers:
                headers[name] = request.headers[name]
        try:
            async with self.service.app.http_client.request(
                request.method, url, data=body, headers=headers, timeout=self.settings.batch_route_timeout_s
            ) as response:
                return response.status, orjson.loads(await response.read())
        except (OSError, TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError) as exc:
            # ClientError: e.g. the owner was killed with our request on its connection.
            raise PartitionNotReady(f"owner {owner} of the batch did not answer: {exc!r}") from exc

    async def _on_owner(
        self, request: web.Request, partition: int, local: Callable[[], ApiModel | Awaitable[ApiModel]]
    ) -> web.Response:
        if partition in self.service.ready:
            result = local()
            if isinstance(result, Awaitable):
                result = await result
            return model_response(result)
        owner = self._owner(request, partition)
        status, data = await self._forward(owner, request, await request.read())
        return json_response(data, status=status)

    async def _remote(self, request: web.Request, owner: str, body: ApiModel) -> Any:
        status, data = await self._forward(owner, request, orjson.dumps(to_wire(body)))
        if status != 200:
            raise _Forwarded(status, data)
        return data

    async def status(self, request: web.Request) -> web.Response:
        """Which table partitions this worker serves, and who serves the others. A partition
        assigned here is served once its recovery and any rebalance are over: until then a request
        for it answers 503, so it is not reported as served."""
        service = self.service
        owners = service.owner_urls()
        return model_response(
            BatchStatus(
                partitions_served=[p for p in sorted(service.ready) if service.serving(p)],
                partitions=service.partitions,
                owners={str(p): u for p, u in sorted(owners.items())},
            )
        )

    # -- exact -----------------------------------------------------------------------------------

    async def create_exact(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = parse_body(CreateExact, await read_json(request) if raw else {})
        partition = self.service.pick_local_partition()
        if partition is not None:
            batch = self.service.create_exact(partition, body.user_key)
            return model_response(Created(batch_id=batch.batch_id))
        owners = self.service.owner_urls()
        others = sorted({url for url in owners.values() if not self._is_self(url)})
        if request.headers.get(ROUTED_HEADER) or not others:
            raise PartitionNotReady("no worker serves a batch table partition right now; retry")
        status, data = await self._forward(others[0], request, raw)
        return json_response(data, status=status)

    async def add_items(self, request: web.Request) -> web.Response:
        body = parse_body(AddItems, await read_json(request))
        batch_id = _batch_id(body.batch_id)
        request_id = _request_id(request)

        def local() -> AddedItems:
            groups = self.service.add_items(batch_id, body.items, request_id)
            return AddedItems(batch_item_group_ids=[ItemGroup(id=g.id, upto=g.upto) for g in groups])

        return await self._on_owner(request, self.service.exact_partition(batch_id), local)

    async def get_exact(self, request: web.Request, batchId: str) -> web.Response:
        batch_id = _batch_id(batchId)

        async def local() -> ExactBatchView:
            batch = self.service.get_exact(batch_id)
            await self.service.publish(self.service.due(batch))
            return exact_view(batch)

        return await self._on_owner(request, self.service.exact_partition(batch_id), local)

    async def close_exact(self, request: web.Request, batchId: str) -> web.Response:
        batch_id = _batch_id(batchId)

        async def local() -> Closed:
            batch, completion = self.service.close_exact(batch_id)
            await self.service.publish([completion] if completion else [])
            return Closed(is_complete=batch.is_complete)

        return await self._on_owner(request, self.service.exact_partition(batch_id), local)

    async def ack(self, request: web.Request) -> web.Response:
        body = parse_body(AckItems, await read_json(request))
        by_partition = self.service.split_by_partition(group_item_ids(body.batch_item_ids))
        local = {p: a for p, a in by_partition.items() if p in self.service.ready}
        remote: dict[str, list[GroupAcks]] = defaultdict(list)
        for partition, acks in by_partition.items():
            if partition not in local:
                remote[self._owner(request, partition)].extend(acks)
        # Ids are answered one by one: the valid ones are applied, the others listed with why.
        sorted_acks = {p: self.service.sort_acks(p, acks) for p, acks in local.items()}
        refused = [
            RefusedItem(item_id=i, error=error, reason=why)
            for s in sorted_acks.values()
            for error, entries in (("BatchNotFound", s.gone), ("ItemNotFound", s.missing))
            for a, why in entries
            for i in item_ids_of([a])
        ] + [
            RefusedItem(item_id=i, error="BatchNotFound", reason="no such batch")
            for s in sorted_acks.values()
            for i in item_ids_of(s.unknown)
        ]
        applied = sum(len(item_ids_of(s.valid)) for s in sorted_acks.values())
        completions: list[BatchCompletion] = []
        for owner, acks in remote.items():
            sent = item_ids_of(acks)
            theirs = AckedItems.model_validate(
                await self._remote(request, owner, AckItems(batch_item_ids=sent))
            )
            completions.extend(theirs.batch_completions)
            refused += theirs.refused_item_ids or []
            applied += len(sent) - len(theirs.refused_item_ids or [])
        if refused and not applied and not request.headers.get(ROUTED_HEADER):
            first = refused[0]  # none applies: 404, as Carlyle answers an unknown id
            error = BatchNotFound if first.error == "BatchNotFound" else ItemNotFound
            raise error(f"no item applied: {first.item_id}: {first.reason}")
        for partition, sorted_ in sorted_acks.items():
            if sorted_.valid:
                outcome = self.service.ack(partition, sorted_.valid)
                await self.service.publish(outcome.completions)
                completions += [
                    BatchCompletion(batch_id=int(c.batch_id), user_key=c.user_key)
                    for c in outcome.completions
                ]
        return model_response(AckedItems(batch_completions=completions, refused_item_ids=refused or None))

    async def delete_expired(self, request: web.Request, closed: bool) -> web.Response:
        require_admin(request, self.settings)
        cutoff_ms = _since_ms(request)
        removal = self.service.expire_exact(closed, cutoff_ms)
        if not request.headers.get(ROUTED_HEADER):
            owners = {url for url in self.service.owner_urls().values() if not self._is_self(url)}
            for owner in sorted(owners):
                status, data = await self._forward(owner, request, None)
                if status != 200:
                    raise _Forwarded(status, data)
                theirs = Removed.model_validate(data)
                removal += Removal(theirs.batches_removed, theirs.items_removed)
        return model_response(
            Removed(batches_removed=removal.batches_removed, items_removed=removal.items_removed)
        )

    # -- estimated -------------------------------------------------------------------------------

    async def create_estimated(self, request: web.Request) -> web.Response:
        body = parse_body(CreateEstimated, await read_json(request))
        size = check_count("batchSize", body.batch_size, 0)
        if self.service.ready:
            batch = self.service.create_estimated(size, body.user_key)
            return model_response(CreatedEstimated(batch_id=batch.batch_id))
        others = sorted({u for u in self.service.owner_urls().values() if not self._is_self(u)})
        if request.headers.get(ROUTED_HEADER) or not others:
            raise PartitionNotReady("no worker serves a batch table partition right now; retry")
        status, data = await self._forward(others[0], request, await request.read())
        return json_response(data, status=status)

    async def get_estimated(self, request: web.Request, batchId: str) -> web.Response:
        batch_id = parse_estimated_id(batchId)

        async def local() -> EstimatedBatchView:
            batch = self.service.get_estimated(batch_id)
            await self.service.publish(self.service.due(batch))
            return estimated_view(batch)

        return await self._on_owner(request, self.service.estimated_partition(batch_id), local)

    async def delete_estimated(self, request: web.Request, batchId: str) -> web.Response:
        batch_id = parse_estimated_id(batchId)

        def local() -> DeletedEstimated:
            self.service.delete_estimated(batch_id)
            return DeletedEstimated(batch_id=batch_id, deleted=True)

        return await self._on_owner(request, self.service.estimated_partition(batch_id), local)

    async def incr_estimated(self, request: web.Request, batchId: str) -> web.Response:
        batch_id = parse_estimated_id(batchId)
        check_query(request, "by")
        try:
            by = int(request.query.get("by", "1"))
        except ValueError as exc:
            raise InvalidInput(f"by={request.query.get('by')!r} is not an integer") from exc
        check_count("by", by, 0)
        request_id = _request_id(request)

        async def local() -> EstimatedBatchView:
            batch, completion = self.service.add_estimated(batch_id, by, request_id)
            await self.service.publish([completion] if completion else [])
            return estimated_view(batch)

        return await self._on_owner(request, self.service.estimated_partition(batch_id), local)

    async def close_estimated(self, request: web.Request, batchId: str) -> web.Response:
        batch_id = parse_estimated_id(batchId)

        async def local() -> Closed:
            batch, completion = self.service.close_estimated(batch_id)
            await self.service.publish([completion] if completion else [])
            return Closed(is_complete=batch.is_complete)

        return await self._on_owner(request, self.service.estimated_partition(batch_id), local)

    async def decr_estimated(self, request: web.Request) -> web.Response:
        body = parse_body(
            DecrEstimated, await read_json(request), 'a JSON object {"acks": [{"batchId": uuid, "by": n}]}'
        )
        request_id = _request_id(request)
        totals: dict[str, int] = defaultdict(int)
        for ack in body.acks:
            totals[parse_estimated_id(ack.batch_id)] += check_count("by", ack.by, 0)
        remote: dict[str, list[EstimatedAck]] = defaultdict(list)
        local: dict[str, int] = {}
        for batch_id, by in totals.items():
            partition = self.service.estimated_partition(batch_id)
            if partition in self.service.ready:
                self.service.get_estimated(batch_id)  # 404 before anything changes
                local[batch_id] = by
            else:
                remote[self._owner(request, partition)].append(EstimatedAck(batch_id=batch_id, by=by))
        results: list[EstimatedResult] = []
        for owner, owner_acks in remote.items():
            data = await self._remote(request, owner, DecrEstimated(acks=owner_acks))
            results.extend(Decremented.model_validate(data).results)
        for batch_id, by in local.items():
            batch, completion = self.service.add_estimated(batch_id, -by, request_id)
            await self.service.publish([completion] if completion else [])
            results.append(
                EstimatedResult(batch_id=batch_id, user_key=batch.user_key, is_complete=batch.is_complete)
            )
        return model_response(Decremented(results=results))


class _Forwarded(Exception):
    """The owner answered an error; relay its status and body as they are."""

    def __init__(self, status: int, data: Any) -> None:
        super().__init__(status)
        self.status, self.data = status, data


def _relaying(handler: Callable[..., Awaitable[web.StreamResponse]]) -> Callable[..., Any]:
    async def wrapper(*args: Any, **kwargs: Any) -> web.StreamResponse:
        try:
            return await handler(*args, **kwargs)
        except _Forwarded as exc:
            return json_response(exc.data, status=exc.status)

    return guarded(wrapper)


def register_views(app: Any, api: BatchApi) -> None:
    """Mount the API on the Faust web server (static paths before `{batchId}` patterns)."""

    routes: list[tuple[str, dict[str, Callable[..., Any]]]] = [
        ("/api/v1/batch/status", {"get": api.status}),
        (f"{EXACT}/items/ack", {"post": api.ack}),
        (f"{EXACT}/items", {"post": api.add_items}),
        (f"{EXACT}/open", {"delete": lambda request: api.delete_expired(request, closed=False)}),
        (f"{EXACT}/closed", {"delete": lambda request: api.delete_expired(request, closed=True)}),
        (f"{EXACT}/close/{{batchId}}", {"post": api.close_exact}),
        (f"{EXACT}/{{batchId}}", {"get": api.get_exact, "delete": api.close_exact}),
        (EXACT, {"post": api.create_exact}),
        (f"{ESTIMATED}/decr", {"post": api.decr_estimated}),
        (f"{ESTIMATED}/{{batchId}}/incr", {"post": api.incr_estimated}),
        (f"{ESTIMATED}/{{batchId}}/close", {"post": api.close_estimated}),
        (f"{ESTIMATED}/{{batchId}}", {"get": api.get_estimated, "delete": api.delete_estimated}),
        (ESTIMATED, {"post": api.create_estimated}),
    ]
    for n, (path, methods) in enumerate(routes):
        attrs: dict[str, Any] = {}
        for method, handler in methods.items():
            attrs[method] = _method(_relaying(handler), api.service)
        app.page(path, name=f"batch_api_{n}")(type(f"BatchView{n}", (View,), attrs))


def _method(handler: Callable[..., Any], service: BatchService) -> Callable[..., Any]:
    async def view_method(self: Any, request: web.Request, **match_info: str) -> web.StreamResponse:
        moves = service.revocations
        result: web.StreamResponse = await handler(request, **match_info)
        await service.flush()  # answer only once the changes are in the changelog
        if request.method != "GET" and result.status < 300 and service.revocations != moves:
            # The table was rebalanced while this write was on its way: the partition's new owner
            # may have restored it before the write reached the changelog, and would not know it.
            reason = "the batch table was rebalanced during this write; retry"
            return model_response(Error(error="ServiceUnavailable", reason=reason), status=503)
        return result

    return view_method
