"""An azure-core transport that makes the embedded Cosmos endpoint answer as real Cosmos DB does
where it does not: 304 Not Modified on a matching If-None-Match read, atomic transactional batches
of creates (one that would fail on an existing document applies nothing and answers 207 with 409
for that operation and 424 for the others; the embedded endpoint keeps the operations before it),
and, on demand, throttling (429 with `x-ms-retry-after-ms`), 408, 503 and 449 (retry with) answers
before a request reaches the endpoint. The real azure-cosmos SDK runs on top of it, with its own
retry policies.

    transport = CosmosSemantics()
    store = await open_cosmos(settings, database=..., transport=transport)
    transport.fail_next(429, count=2, operation="POST")   # the next two writes are throttled
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from azure.core.pipeline.transport import AioHttpTransport, AioHttpTransportResponse

SUBSTATUS = {429: "3200", 408: "0", 503: "0", 449: "0"}


@dataclass
class _Fault:
    status: int
    count: int
    method: str | None
    path_contains: str | None
    retry_after_ms: int
    applied: bool


def _bodiless_headers(request: Any) -> dict[str, str]:
    """The request's headers for a GET sent in its place: without the body's length and type (on a
    kept-alive connection the endpoint would read the next request as this one's body)."""
    dropped = ("x-ms-cosmos-batch", "x-ms-cosmos-is-batch", "content-length", "content-type")
    return {k: v for k, v in request.headers.items() if not k.lower().startswith(dropped)}


def _probe(request: Any) -> Any:
    """A harmless GET of the account, answered in place of a request that must not be applied."""
    return request.__class__("GET", request.url.split("/dbs/")[0] + "/", headers=_bodiless_headers(request))


async def _loaded() -> None:
    return None


class CosmosSemantics(AioHttpTransport):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.faults: list[_Fault] = []
        self.answered: dict[int, int] = {}  # status -> how often it was answered by this transport
        self.seen: list[tuple[str, str, int]] = []  # (method, url, status) as the SDK saw them
        self.rolled_back = 0  # transactional batches answered as failed, nothing applied

    def fail_next(
        self,
        status: int,
        *,
        count: int = 1,
        method: str | None = None,
        path_contains: str | None = None,
        retry_after_ms: int = 10,
        applied: bool = False,
    ) -> None:
        """Answer the next `count` matching requests with `status`; with `applied`, the request
        reaches the endpoint first (a timeout after the write was done), else it never does."""
        self.faults.append(_Fault(status, count, method, path_contains, retry_after_ms, applied))

    def _fault_for(self, request: Any) -> _Fault | None:
        for fault in self.faults:
            if fault.count <= 0:
                continue
            if fault.method is not None and request.method != fault.method:
                continue
            if fault.path_contains is not None and fault.path_contains not in request.url:
                continue
            fault.count -= 1
            return fault
        return None

    async def send(self, request: Any, **kwargs: Any) -> AioHttpTransportResponse:
        fault = self._fault_for(request) if "/docs" in request.url else None
        if fault is not None:
            # Unless applied: ask the endpoint something harmless and answer with the fault's
            # status instead, so that the refused request is never applied.
            response = await super().send(_probe(request), **kwargs)
            await response.load_body()
            self._rewrite(response, fault.status, b"{}")
            if fault.status == 429 or fault.status == 449:
                response.headers["x-ms-retry-after-ms"] = str(fault.retry_after_ms)
            response.headers["x-ms-substatus"] = SUBSTATUS.get(fault.status, "0")
            self.seen.append((request.method, request.url, fault.status))
            return response
        if str(request.headers.get("x-ms-cosmos-is-batch-request", "")).lower() == "true":
            refused = await self._atomic_refusal(request, **kwargs)
            if refused is not None:
                return refused
        response = await super().send(request, **kwargs)
        wanted = request.headers.get("If-None-Match")
        if request.method == "GET" and wanted and wanted != "*":
            await response.load_body()
            if response.status_code == 200 and response.headers.get("etag") == wanted:
                self._rewrite(response, 304, b"")
        self.seen.append((request.method, request.url, response.status_code))
        return response

    async def _atomic_refusal(self, request: Any, **kwargs: Any) -> AioHttpTransportResponse | None:
        """A batch of creates where one document exists already: real Cosmos DB applies none of it."""
        operations = orjson.loads(request.data or b"[]")
        headers = _bodiless_headers(request)
        failed_at = None
        for index, operation in enumerate(operations):
            if operation.get("operationType") != "Create":
                return None  # only batches of creates are emulated
            doc_url = f"{request.url.rstrip('/')}/{operation['resourceBody']['id']}"
            found = await super().send(request.__class__("GET", doc_url, headers=headers), **kwargs)
            await found.load_body()
            if found.status_code == 200:
                failed_at = index
                break
        if failed_at is None:
            return None
        results = [{"statusCode": 409 if i == failed_at else 424} for i in range(len(operations))]
        response = await super().send(_probe(request), **kwargs)
        await response.load_body()
        self._rewrite(response, 207, orjson.dumps(results))
        self.rolled_back += 1
        self.seen.append((request.method, request.url, 207))
        return response

    def _rewrite(self, response: AioHttpTransportResponse, status: int, body: bytes) -> None:
        response.status_code = status
        response.reason = {304: "Not Modified", 429: "Too Many Requests"}.get(status, "Fault")
        response._content = body
        response._decompressed_content = True
        loaded: Callable[[], Any] = _loaded
        response.load_body = loaded  # the body above is the whole answer
        self.answered[status] = self.answered.get(status, 0) + 1
