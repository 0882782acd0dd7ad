"""The actor API over HTTP: JWT auth, 204/200 peeks, same bundle again, 404 dequeues, bad input."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import jwt
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from app.hub import MessageHub
from app.hub.web import HubApi
from app.settings import Settings
from tests.integration.hub.conftest import events, ids

Client = TestClient[web.Request, web.Application]


def token(settings: Settings, actor: str, ttl_s: int = 60, secret: str | None = None) -> dict[str, str]:
    now = int(time.time())
    key = secret or settings.hub_jwt_secret.get_secret_value()
    encoded = jwt.encode({"sub": actor, "iat": now, "exp": now + ttl_s}, key, algorithm="HS256")
    return {"Authorization": f"Bearer {encoded}"}


@pytest_asyncio.fixture
async def client(hub: MessageHub, stack: Settings) -> AsyncIterator[Client]:
    async def provide() -> MessageHub:
        return hub

    app = web.Application()
    app.add_routes(HubApi(provide, stack).routes())
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_missing_invalid_or_expired_token_is_401(client: Client, stack: Settings) -> None:
    assert (await client.get("/api/peek")).status == 401
    forged = token(stack, "a1", secret="not-the-secret-but-long-enough-for-hs256")
    assert (await client.get("/api/peek", headers=forged)).status == 401
    expired = token(stack, "a1", ttl_s=-10)
    response = await client.get("/api/peek", headers=expired)
    assert response.status == 401 and "expired" in (await response.json())["reason"]
    assert (await client.delete("/api/dequeue?bundleId=" + str(uuid.uuid4()))).status == 401


async def test_peek_dequeue_over_http(client: Client, hub: MessageHub, stack: Settings, unique: str) -> None:
    actor, other = f"http-{unique}", f"other-{unique}"
    auth = token(stack, actor)
    assert (await client.get("/api/peek", headers=auth)).status == 204
    saved = events(actor, 3) + events(actor, 2, domain="masterdata")
    await hub.save(saved)
    chosen = str(uuid.uuid4())
    first = await client.get(f"/api/peek/timeseries?bundleId={chosen}", headers=auth)
    body = await first.json()
    assert first.status == 200 and body["bundleId"] == chosen and body["domain"] == "timeseries"
    assert [e["id"] for e in body["events"]] == ids(saved[:3])
    again = await (await client.get("/api/peek/timeseries", headers=auth)).json()
    assert again == body
    assert (await client.delete(f"/api/dequeue?bundleId={chosen}", headers=token(stack, other))).status == 404
    assert (await client.get("/api/peek", headers=token(stack, other))).status == 204
    done = await client.delete(f"/api/dequeue?bundleId={chosen}", headers=auth)
    assert done.status == 200 and (await done.json())["dequeued"] is True
    repeated = await client.delete(f"/api/dequeue?bundleId={chosen}", headers=auth)  # a lost answer
    assert repeated.status == 200, "a repeated dequeue of the actor's own bundle is idempotent"
    unknown = await client.delete(f"/api/dequeue?bundleId={uuid.uuid4()}", headers=auth)
    assert unknown.status == 404
    rest = await (await client.get("/api/peek", headers=auth)).json()
    assert [e["id"] for e in rest["events"]] == ids(saved[3:])


async def test_bad_input_is_400(client: Client, stack: Settings) -> None:
    auth = token(stack, "a1")
    assert (await client.get("/api/peek/weather", headers=auth)).status == 400
    assert (await client.get("/api/peek?bundleId=not-a-guid", headers=auth)).status == 400
    empty = await client.get("/api/peek?bundleId=", headers=auth)  # found by the HTTP fuzz test
    assert empty.status == 400 and "bundleId" in (await empty.json())["reason"]
    missing = await client.delete("/api/dequeue", headers=auth)
    assert missing.status == 400 and "bundleId" in (await missing.json())["reason"]
