"""The actors' drain loop against a small in-process actor API: it counts what actors were shown,
spots duplicates and FIFO breaks, rides out 5xx answers, and comes back for late events."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

from app.flow.actors import drain_actors

SECRET = "s" * 32


class FakeHub:
    """Bundles of two events per actor; dequeue removes the peeked bundle and, asked to
    (`peek=all`), answers the next one as a peek would."""

    def __init__(self, events: dict[str, list[int]]) -> None:
        self.events = {actor: list(seqs) for actor, seqs in events.items()}
        self.open: dict[str, tuple[str, list[int]]] = {}
        self.fail_next = 0
        self.redeliver_once: set[str] = set()  # actors whose dequeued bundle shows once more

    def actor(self, request: web.Request) -> str:
        token = request.headers["Authorization"].removeprefix("Bearer ")
        return str(jwt.decode(token, SECRET, algorithms=["HS256"])["sub"])

    def next_bundle(self, actor: str) -> dict[str, Any] | None:
        if actor not in self.open:
            seqs = self.events.get(actor, [])[:2]
            if not seqs:
                return None
            self.open[actor] = (str(uuid.uuid4()), seqs)
        bundle_id, seqs = self.open[actor]
        return {
            "bundleId": bundle_id,
            "domain": "timeseries",
            "messageType": "T",
            "events": [{"id": f"{actor}-{s}", "sequence": s} for s in seqs],
        }

    async def peek(self, request: web.Request) -> web.Response:
        if self.fail_next:
            self.fail_next -= 1
            return web.Response(status=503)
        bundle = self.next_bundle(self.actor(request))
        return web.Response(status=204) if bundle is None else web.json_response(bundle)

    async def dequeue(self, request: web.Request) -> web.Response:
        actor = self.actor(request)
        bundle_id, seqs = self.open.pop(actor)
        assert request.query["bundleId"] == bundle_id
        if actor in self.redeliver_once:
            self.redeliver_once.discard(actor)
        else:
            del self.events[actor][: len(seqs)]
        body: dict[str, Any] = {"bundleId": bundle_id, "dequeued": True}
        assert request.query["peek"] == "all"  # the actors drain with one call per bundle
        following = self.next_bundle(actor)
        if following is not None:
            body["next"] = following
        return web.json_response(body)


@pytest_asyncio.fixture
async def served() -> AsyncIterator[tuple[FakeHub, str]]:
    hub = FakeHub({"a": [0, 1, 2, 3, 4], "b": [0, 1]})
    app = web.Application()
    app.router.add_get("/api/peek", hub.peek)
    app.router.add_delete("/api/dequeue", hub.dequeue)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield hub, str(server.make_url(""))
    await server.close()


async def test_every_event_is_counted_once_and_5xx_is_retried(served: tuple[FakeHub, str]) -> None:
    hub, url = served
    hub.fail_next = 2
    report = await drain_actors([url], SECRET, ["a", "b"], expected=7, deadline_s=5)
    assert (report.drained, report.duplicates, report.fifo_violations) == (7, 0, 0)
    assert report.per_actor == {"a": 5, "b": 2}
    assert report.bundles == 4
    assert report.retries == 2


async def test_an_event_shown_again_after_dequeue_is_a_duplicate(served: tuple[FakeHub, str]) -> None:
    hub, url = served
    hub.redeliver_once.add("b")
    report = await drain_actors([url], SECRET, ["b"], expected=2, deadline_s=5)
    assert (report.drained, report.duplicates) == (2, 2)
    assert report.fifo_violations == 1  # the cabinet went back from sequence 1 to 0


async def test_the_actors_come_back_for_events_that_show_late(served: tuple[FakeHub, str]) -> None:
    hub, url = served
    late = hub.events.pop("a")
    calls = 0

    def progress(_: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # after the first round, a's events become visible
            hub.events["a"] = late

    report = await drain_actors(
        [url], SECRET, ["a", "b"], expected=7, deadline_s=10, poll_s=0.01, progress=progress
    )
    assert report.drained == 7
