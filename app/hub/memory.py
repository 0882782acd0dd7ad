"""An in-memory HubStore with the Cosmos adapter's rules, for unit tests of the hub's concurrency.

Per container, per partition key, documents as JSON dicts (deep-copied in and out, so a caller never
holds the stored one). Every write stamps a new etag (a global counter); replace and delete under
If-Match fail on a stale etag, a create fails on an existing id: both answered as the adapter answers
them (None / False, counted in `counter.etag_conflicts` for 412s). Every request yields to the event
loop first, like a network round trip, so concurrent callers really interleave.

Bulk creates go in batches of BATCH_LIMIT as in the adapter: a batch holding an existing id fails
whole (`atomic_batches=True`, real Cosmos DB), or keeps the creates before the failing one
(`atomic_batches=False`, the embedded endpoint). `bulk_create` then finishes the batch one create at
a time, where an existing id counts as done.

Queries: only the shapes the hub issues (see `parse_query`), anything else raises UnsupportedQuery.
A query's results are taken when its first page is requested, and served a page per request.

Hooks, for tests: `before(request)` is awaited at the start of every request (a read, a query page,
a write) and `after(request)` once a write took effect. Raising from `before` fails the request with
nothing written (a write that never reached the store); raising from `after` loses the answer of a
write that did happen. Awaiting in either holds the caller there while others run.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from app.errors import ConfigError
from app.hub.model import CabinetKey, Ledger
from app.hub.ports import AllPages, BatchedCreates, HubStore, RequestCounter

__all__ = ["MemoryContainer", "MemoryHubStore", "Query", "Request", "UnsupportedQuery", "parse_query"]

Op = Literal["read", "query", "create", "replace", "delete", "batch"]
Hook = Callable[["Request"], Awaitable[None]]


class UnsupportedQuery(ValueError):
    """A query the in-memory store does not understand (it knows only the hub's own shapes)."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request to the store, as the hooks see it."""

    op: Op
    container: str  # the container's name: events, events-1, ..., drawers, catalog, ledgers, ids
    partition_key: str
    ids: tuple[str, ...] = ()  # the documents it names (none for a query)

    @property
    def is_write(self) -> bool:
        return self.op in ("create", "replace", "delete", "batch")


@dataclass(eq=False)
class MemoryContainer:
    """A container: partition key -> document id -> stored document (with `_etag`)."""

    id: str
    partitions: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def partition(self, partition_key: str) -> dict[str, dict[str, Any]]:
        return self.partitions.setdefault(partition_key, {})

    def documents(self) -> list[dict[str, Any]]:
        """Every stored document (copies), partition by partition."""
        return [copy.deepcopy(d) for docs in self.partitions.values() for d in docs.values()]


# ---- queries ----------------------------------------------------------------------------------

_FIELD = r'c\.(\w+)|c\["(\w+)"\]'
_SELECT = re.compile(
    r"^SELECT (?:TOP (?P<top>\d+) )?(?P<proj>.+?) FROM c WHERE (?P<where>.+?)"
    r"(?: ORDER BY c\.(?P<order>\w+)(?: ASC)?)?$"
)
_COMPARE = re.compile(rf"^(?:{_FIELD}) (?P<op><=|>=|=|<|>) @(?P<param>\w+)$")
_IS_NUMBER = re.compile(rf"^IS_NUMBER\((?:{_FIELD})\)$")
_REF = re.compile(rf"^(?:{_FIELD})$")


def _field(match: re.Match[str]) -> str:
    return match.group(1) or match.group(2)


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query: projection, conjunctive filter, order, limit."""

    value: str | None  # SELECT VALUE c.x
    fields: tuple[str, ...] | None  # SELECT c.x, c.y (None: SELECT *)
    compares: tuple[tuple[str, str, str], ...]  # (field, operator, parameter)
    numbers: tuple[str, ...]  # IS_NUMBER(field)
    order: str | None
    top: int | None

    def run(self, docs: Sequence[dict[str, Any]], params: dict[str, Any]) -> list[Any]:
        for _, _, param in self.compares:
            if f"@{param}" not in params:
                raise UnsupportedQuery(f"parameter @{param} has no value")
        found = [
            d
            for d in docs
            if all(_is_number(d.get(f)) for f in self.numbers)
            and all(_compare(d.get(f, _MISSING), op, params[f"@{p}"]) for f, op, p in self.compares)
        ]
        if self.order is not None:
            key = self.order
            found = sorted((d for d in found if _is_number(d.get(key))), key=lambda d: d[key])
        if self.top is not None:
            found = found[: self.top]
        if self.value is not None:
            return [copy.deepcopy(d[self.value]) for d in found if self.value in d]
        if self.fields is not None:
            return [{f: copy.deepcopy(d[f]) for f in self.fields if f in d} for d in found]
        return [copy.deepcopy(d) for d in found]


_MISSING = object()


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(left: object, op: str, right: object) -> bool:
    """Cosmos DB's rule: values of different types (or an undefined field) compare to undefined,
    which a filter treats as false."""
    if left is _MISSING:
        return False
    a: Any = left
    b: Any = right
    if (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str)):
        return bool({"=": a == b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op])
    return op == "=" and type(a) is type(b) and a == b  # null = null, true = true


def parse_query(sql: str) -> Query:
    """Parse one of the shapes the hub issues, or raise UnsupportedQuery:

    SELECT [TOP n] (* | VALUE c.f | c.f, c.g, ...) FROM c WHERE cond AND ... [ORDER BY c.f [ASC]]
    with cond one of `c.f <op> @p` (op in = < <= > >=) and `IS_NUMBER(c.f)`; c["f"] as c.f.
    """
    text = " ".join(sql.split())
    select = _SELECT.match(text)
    if select is None:
        raise UnsupportedQuery(f"the in-memory hub store does not support the query {sql!r}")
    projection = select.group("proj")
    value: str | None = None
    fields: tuple[str, ...] | None = None
    if projection.startswith("VALUE "):
        ref = _REF.match(projection.removeprefix("VALUE "))
        if ref is None:
            raise UnsupportedQuery(f"projection {projection!r} of {sql!r} is not supported")
        value = _field(ref)
    elif projection != "*":
        refs = [_REF.match(part.strip()) for part in projection.split(",")]
        if any(r is None for r in refs):
            raise UnsupportedQuery(f"projection {projection!r} of {sql!r} is not supported")
        fields = tuple(_field(r) for r in refs if r is not None)
    compares: list[tuple[str, str, str]] = []
    numbers: list[str] = []
    for condition in select.group("where").split(" AND "):
        if (compare := _COMPARE.match(condition)) is not None:
            compares.append((_field(compare), compare.group("op"), compare.group("param")))
        elif (number := _IS_NUMBER.match(condition)) is not None:
            numbers.append(_field(number))
        else:
            raise UnsupportedQuery(f"condition {condition!r} of {sql!r} is not supported")
    top = select.group("top")
    return Query(
        value, fields, tuple(compares), tuple(numbers), select.group("order"), int(top) if top else None
    )


# ---- the store --------------------------------------------------------------------------------


class MemoryHubStore(AllPages["MemoryContainer"], BatchedCreates["MemoryContainer"]):
    """HubStore[MemoryContainer]: the hub's five kinds of container in memory."""

    def __init__(
        self,
        event_containers: int = 1,
        *,
        atomic_batches: bool = True,
        before: Hook | None = None,
        after: Hook | None = None,
    ) -> None:
        if event_containers < 1:
            raise ValueError("event_containers must be at least 1")
        self.event_shards = [
            MemoryContainer("events" + (f"-{i}" if i else "")) for i in range(event_containers)
        ]
        self.drawers = MemoryContainer("drawers")
        self.catalog = MemoryContainer("catalog")
        self.ledgers = MemoryContainer("ledgers")
        self.ids = MemoryContainer("ids")
        self.counter = RequestCounter()
        self.atomic_batches = atomic_batches
        self.before = before
        self.after = after
        self._etags = itertools.count(1)
        self.clock: Callable[[], float] = time.time  # stamps `_ts` (seconds) as Cosmos DB does
        self._queries: dict[str, Query] = {}

    # ---- the port's non-I/O part, as the adapter has it

    def events(self, ledger: Ledger, cabinet: CabinetKey, ordinal: int) -> MemoryContainer:
        if ledger.containers > len(self.event_shards):
            raise ConfigError(
                f"the events of {ledger.recipient} spread over {ledger.containers} event containers,"
                f" but only {len(self.event_shards)} are configured: HUB_EVENT_CONTAINERS must never shrink"
            )
        return self.event_shards[ledger.drawer_container(cabinet, ordinal)]

    def new_ledger(self, recipient: str) -> Ledger:
        return Ledger(recipient, containers=len(self.event_shards))

    # ---- plumbing

    async def _request(self, request: Request) -> None:
        self.counter.add()
        await asyncio.sleep(0)  # a round trip: let the other callers run
        if self.before is not None:
            await self.before(request)

    async def _written(self, request: Request) -> None:
        if self.after is not None:
            await self.after(request)

    def _store(self, container: MemoryContainer, doc: dict[str, Any]) -> str:
        body = copy.deepcopy(doc)
        etag = f'"{next(self._etags):08x}"'
        body["_etag"] = etag
        body["_ts"] = int(self.clock())
        container.partition(_partition_key(doc))[str(doc["id"])] = body
        return etag

    # ---- reads

    async def read(
        self, container: MemoryContainer, doc_id: str, partition_key: str
    ) -> dict[str, Any] | None:
        await self._request(Request("read", container.id, partition_key, (doc_id,)))
        doc = container.partition(partition_key).get(doc_id)
        return None if doc is None else copy.deepcopy(doc)

    async def pages(
        self,
        container: MemoryContainer,
        sql: str,
        partition_key: str,
        params: dict[str, Any] | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[list[dict[str, Any]]]:
        query = self._queries.get(sql)
        if query is None:
            query = self._queries[sql] = parse_query(sql)
        request = Request("query", container.id, partition_key)
        await self._request(request)
        found = query.run(list(container.partition(partition_key).values()), params or {})
        for start in range(0, len(found), page_size):
            if start:
                await self._request(request)
            yield found[start : start + page_size]
        if not found:
            yield []

    async def read_all(self, container: MemoryContainer) -> AsyncIterator[dict[str, Any]]:
        await self._request(Request("query", container.id, ""))
        for doc in container.documents():
            yield doc

    # ---- point writes

    async def create(self, container: MemoryContainer, doc: dict[str, Any]) -> bool:
        return await self.create_tagged(container, doc) is not None

    async def create_tagged(self, container: MemoryContainer, doc: dict[str, Any]) -> str | None:
        request = Request("create", container.id, _partition_key(doc), (str(doc["id"]),))
        await self._request(request)
        if str(doc["id"]) in container.partition(request.partition_key):
            return None
        etag = self._store(container, doc)
        await self._written(request)
        return etag

    async def replace_if_match(self, container: MemoryContainer, doc: dict[str, Any], etag: str) -> bool:
        return await self.replace_tagged(container, doc, etag) is not None

    async def replace_tagged(self, container: MemoryContainer, doc: dict[str, Any], etag: str) -> str | None:
        request = Request("replace", container.id, _partition_key(doc), (str(doc["id"]),))
        await self._request(request)
        current = container.partition(request.partition_key).get(str(doc["id"]))
        if current is None:
            return None
        if current["_etag"] != etag:
            self.counter.etag_conflicts += 1
            return None
        new_etag = self._store(container, doc)
        await self._written(request)
        return new_etag

    async def delete_if_match(
        self, container: MemoryContainer, doc_id: str, partition_key: str, etag: str
    ) -> bool:
        request = Request("delete", container.id, partition_key, (doc_id,))
        await self._request(request)
        docs = container.partition(partition_key)
        current = docs.get(doc_id)
        if current is None:
            return False
        if current["_etag"] != etag:
            self.counter.etag_conflicts += 1
            return False
        del docs[doc_id]
        await self._written(request)
        return True

    async def delete(self, container: MemoryContainer, doc_id: str, partition_key: str) -> None:
        request = Request("delete", container.id, partition_key, (doc_id,))
        await self._request(request)
        if container.partition(partition_key).pop(doc_id, None) is not None:
            await self._written(request)

    # ---- one batch of creates (BatchedCreates splits a bulk into them as for the adapter)

    async def batch_create(
        self, container: MemoryContainer, partition_key: str, docs: Sequence[dict[str, Any]]
    ) -> bool:
        """One batch of creates in one partition; False when it met an id already there."""
        for doc in docs:
            if _partition_key(doc) != partition_key:
                raise ValueError(f"document {doc['id']!r} is not of the batch's partition {partition_key!r}")
        request = Request("batch", container.id, partition_key, tuple(str(d["id"]) for d in docs))
        await self._request(request)
        existing = container.partition(partition_key)
        seen: set[str] = set()
        failing = len(docs)
        for i, doc in enumerate(docs):
            doc_id = str(doc["id"])
            if doc_id in existing or doc_id in seen:
                failing = i
                break
            seen.add(doc_id)
        writes = docs if failing == len(docs) else ([] if self.atomic_batches else docs[:failing])
        for doc in writes:
            self._store(container, doc)
        if writes:
            await self._written(request)
        return failing == len(docs)


def _partition_key(doc: dict[str, Any]) -> str:
    if not isinstance(doc.get("pk"), str):
        raise ValueError(f"document {doc.get('id')!r} has no string partition key 'pk'")
    return str(doc["pk"])


if TYPE_CHECKING:

    def _implements_the_port(store: MemoryHubStore) -> HubStore[MemoryContainer]:
        return store
