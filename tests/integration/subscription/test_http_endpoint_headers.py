"""What an HTTP endpoint receives as headers: a record's own headers pass through, but never in
place of the ones hubstream sets (whatever their case), and the delivering shard's lease epoch
comes as X-Owner-Epoch. A real aiohttp server on loopback takes the requests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from aiohttp import web
from multidict import CIMultiDictProxy

from app.subscription.endpoints import HttpEndpoint
from app.subscription.model import EndpointSpec
from app.subscription.records import SubscriptionMessage


@pytest_asyncio.fixture
async def server() -> AsyncIterator[tuple[str, list[CIMultiDictProxy[str]]]]:
    seen: list[CIMultiDictProxy[str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/in", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/in", seen
    await runner.cleanup()


async def test_record_headers_never_replace_ours(server: tuple[str, list[CIMultiDictProxy[str]]]) -> None:
    url, seen = server
    endpoint = HttpEndpoint(EndpointSpec("http", url, 5.0))
    message = SubscriptionMessage(
        "orders",
        "g1",
        "m-1",
        b"x",
        2,
        headers={"x-group-id": "someone-else", "X-OWNER-EPOCH": "999999", "trace": "t-1"},
        owner_epoch=7,
    )
    try:
        await endpoint(message)
    finally:
        await endpoint.close()
    (headers,) = seen
    assert headers.getall("X-Group-Id") == ["g1"]
    assert headers.getall("X-Owner-Epoch") == ["7"]
    assert headers["X-Attempt"] == "2" and headers["trace"] == "t-1"


async def test_no_epoch_header_without_a_lease(server: tuple[str, list[CIMultiDictProxy[str]]]) -> None:
    url, seen = server
    endpoint = HttpEndpoint(EndpointSpec("http", url, 5.0))
    try:
        await endpoint(SubscriptionMessage("orders", "g1", "m-1", b"x", 1, headers={"X-Owner-Epoch": "5"}))
    finally:
        await endpoint.close()
    assert "X-Owner-Epoch" not in seen[0]
