"""What an HTTP endpoint receives as headers: a record's own headers pass through, but never in
place of the ones hubstream sets (whatever their case), never framing the request or speaking
for anyone, and the delivering shard's lease epoch comes as X-Owner-Epoch; a failure names the
endpoint without its credentials. Real servers on loopback take the requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from multidict import CIMultiDictProxy

from app.subscription.endpoints import HttpEndpoint, HttpUnavailable
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


async def test_record_headers_never_frame_the_request_nor_speak_for_anyone() -> None:
    """A foreign producer's record with `Transfer-Encoding: chunked`, `Host`, `Authorization` and a
    CR/LF in a value: before, aiohttp sent the first three as they were (next to its own
    Content-Length: request smuggling) and the server saw them. Read here off the raw socket."""
    received: list[bytes] = []
    done = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        received.append(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()
        done.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    endpoint = HttpEndpoint(EndpointSpec("http", f"http://127.0.0.1:{port}/in", 5.0))
    headers = {
        "Transfer-Encoding": "chunked",
        "Host": "evil.example",
        "Authorization": "Bearer stolen",
        "Cookie": "session=theirs",
        "Proxy-Authorization": "Basic eA==",
        "trace": "t-1\r\nX-Injected: yes",
        "tenant": "acme",
    }
    try:
        await endpoint(SubscriptionMessage("orders", "g1", "m-1", b"payload", 1, headers=headers))
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await endpoint.close()
        server.close()
        await server.wait_closed()
    (raw,) = received
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = [line.lower() for line in head.split(b"\r\n")[1:]]
    names = [line.split(b":")[0] for line in lines]
    assert body == b"payload"
    assert b"transfer-encoding" not in names and names.count(b"content-length") == 1
    assert f"host: 127.0.0.1:{port}".encode() in lines
    assert not {b"authorization", b"cookie", b"proxy-authorization", b"x-injected", b"trace"} & set(names)
    assert b"tenant: acme" in lines and b"x-group-id: g1" in lines


async def test_an_allow_list_sends_only_the_named_headers(
    server: tuple[str, list[CIMultiDictProxy[str]]],
) -> None:
    url, seen = server
    endpoint = HttpEndpoint(EndpointSpec("http", url, 5.0, ("Authorization", "tenant")))
    headers = {"authorization": "Bearer per-tenant", "tenant": "acme", "trace": "t-1", "Host": "evil.example"}
    try:
        await endpoint(SubscriptionMessage("orders", "g1", "m-1", b"x", 1, headers=headers))
    finally:
        await endpoint.close()
    (got,) = seen
    assert got["Authorization"] == "Bearer per-tenant" and got["tenant"] == "acme"
    assert "trace" not in got and got["Host"] != "evil.example"


async def test_a_failure_names_the_endpoint_without_its_credentials() -> None:
    """What a failed delivery says goes into the DLQ copy's headers and the logs: the URL's
    user and password are hidden there (before, they were written as given)."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()  # nothing listens there now: the connection is refused
    endpoint = HttpEndpoint(EndpointSpec("http", f"http://alice:s3cret@127.0.0.1:{port}/in", 5.0))
    try:
        with pytest.raises(HttpUnavailable) as failed:
            await endpoint(SubscriptionMessage("orders", "g1", "m-1", b"x", 1))
    finally:
        await endpoint.close()
    assert "s3cret" not in str(failed.value) and "alice" not in str(failed.value)
    assert f"http://***@127.0.0.1:{port}/in" in str(failed.value)
