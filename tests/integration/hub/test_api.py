"""The actor API over HTTP: JWT auth, 204/200 peeks, same bundle again, 404 dequeues, bad input."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import jwt
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from app.crashpoints import armed
from app.hub import MessageHub, acknowledge
from app.hub.acknowledge import MAX_DEFERRED_DRAWERS
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
    expired = token(stack, "a1", ttl_s=-int(stack.hub_jwt_leeway_s) - 10)  # past the clock leeway
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


async def test_a_dequeue_asking_for_the_next_bundle_answers_it(
    client: Client, hub: MessageHub, stack: Settings, unique: str
) -> None:
    actor = f"next-{unique}"
    auth = token(stack, actor)
    saved = events(actor, 1, bundleable=False) + events(actor, 2, domain="masterdata") + events(actor, 2)
    await hub.save(saved)
    first = await (await client.get("/api/peek", headers=auth)).json()
    assert [e["id"] for e in first["events"]] == ids(saved[:1])
    answer = await client.delete(f"/api/dequeue?bundleId={first['bundleId']}&peek=timeseries", headers=auth)
    body = await answer.json()
    assert answer.status == 200 and body["bundleId"] == first["bundleId"] and body["dequeued"] is True
    second = body["next"]
    assert second["domain"] == "timeseries" and [e["id"] for e in second["events"]] == ids(saved[3:])
    # The answer was lost: the same call answers the same next bundle, which a peek shows too.
    again = await (
        await client.delete(f"/api/dequeue?bundleId={first['bundleId']}&peek=timeseries", headers=auth)
    ).json()
    assert again["next"] == second
    assert await (await client.get("/api/peek/timeseries", headers=auth)).json() == second
    third = (
        await (
            await client.delete(f"/api/dequeue?bundleId={second['bundleId']}&peek=all", headers=auth)
        ).json()
    )["next"]
    assert third["domain"] == "masterdata" and [e["id"] for e in third["events"]] == ids(saved[1:3])
    last = await client.delete(f"/api/dequeue?bundleId={third['bundleId']}&peek=all", headers=auth)
    assert last.status == 200 and "next" not in await last.json()  # nothing left
    assert (await client.get("/api/peek", headers=auth)).status == 204
    wrong = await client.delete(f"/api/dequeue?bundleId={third['bundleId']}&peek=weather", headers=auth)
    assert wrong.status == 400 and "weather" in (await wrong.json())["reason"]


@pytest.mark.parametrize(
    ("point", "deferred_drawers"),
    [("hub.ack.drawer", 0), ("eventstore.tip.replace", 0), ("eventstore.tip.replace", MAX_DEFERRED_DRAWERS)],
    ids=["hub.ack.drawer", "eventstore.tip.replace-writing", "eventstore.tip.replace-deferring"],
)
@pytest.mark.parametrize("nth", [1, 2, 3])
async def test_a_dequeue_asking_for_the_next_bundle_failing_at_a_write_and_repeated_shows_each_event_once(
    client: Client,
    hub: MessageHub,
    stack: Settings,
    unique: str,
    point: str,
    deferred_drawers: int,
    nth: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The write at the crash point fails (503) once, at its nth use during the drain; the actor
    repeats the call, as it does after any 5xx. It is shown every event once, in order.

    With `deferred_drawers` 0 every dequeue writes its drawers (so the drawer write is reached at
    every dequeue); otherwise a dequeue leaving events in a drawer records the drawer's position
    with the append that fails."""
    monkeypatch.setattr(acknowledge, "MAX_DEFERRED_DRAWERS", deferred_drawers)
    actor = f"crash-{unique}"
    auth = token(stack, actor)
    saved = [e for i in range(6) for e in events(actor, 1, bundleable=i % 2 == 0)]  # 4 bundles
    await hub.save(saved)
    shown: list[str] = []
    failures = 0
    with armed(point, nth=nth, action="raise") as trigger:
        response = await client.get("/api/peek", headers=auth)
        while response.status == 503:
            failures += 1
            response = await client.get("/api/peek", headers=auth)
        bundle = await response.json()
        while bundle is not None:
            shown += [e["id"] for e in bundle["events"]]
            path = f"/api/dequeue?bundleId={bundle['bundleId']}&peek=all"
            response = await client.delete(path, headers=auth)
            if response.status == 503:
                failures += 1
                response = await client.delete(path, headers=auth)
            assert response.status == 200, await response.text()
            bundle = (await response.json()).get("next")
    assert trigger.fired and failures == 1, point
    assert shown == ids(saved)
