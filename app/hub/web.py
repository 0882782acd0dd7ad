"""The actor API: GET /api/peek[/{domain}], DELETE /api/dequeue[?peek=], behind a bearer JWT (HS256).

The token's subject is the actor id; an actor only ever sees its own bundles.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from faust.web import View

from app.errors import InvalidInput
from app.hub.api_models import bundle_wire, dequeued_wire
from app.hub.known import Recent
from app.hub.service import MessageHub, parse_bundle_id, parse_domains, parse_peek
from app.hub.tokens import TokenRules, verify_actor_token
from app.settings import Settings
from app.web.responses import Unauthorized, check_query, guarded, json_response

__all__ = ["HubApi", "HubHolder", "VerifiedTokens", "actor_from_request", "register_views"]

HubProvider = Callable[[], Awaitable[MessageHub]]
_ACTOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")  # the DataAvailable recipient rule


class VerifiedTokens:
    """Actor ids of tokens already verified, until their `exp`: an actor sends the same token with
    every peek and dequeue, and an HS256 decode per request was a twentieth of a worker's CPU
    during a drain. Bounded: the least recently used go first."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._actors: Recent[str, float] = Recent(max_entries)

    def get(self, token: str) -> str | None:
        found = self._actors.get(token)
        if found is None:
            return None
        actor, expires_at = found
        if time.time() >= expires_at:  # as PyJWT: a token is expired from its `exp` on
            self._actors.drop(token)
            return None
        return actor

    def put(self, token: str, actor: str, expires_at: float) -> None:
        self._actors.put(token, actor, expires_at)


def actor_from_request(
    request: web.Request, settings: Settings, verified: VerifiedTokens | None = None
) -> str:
    """The actor id from `Authorization: Bearer <jwt>`; Unauthorized when missing, invalid or expired."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        raise Unauthorized("missing bearer token (Authorization: Bearer <JWT>)")
    token = header.removeprefix("Bearer ").strip()
    if verified is not None and (known := verified.get(token)) is not None:
        return known
    actor, expires = verify_actor_token(TokenRules.of(settings), token)
    if verified is not None:
        verified.put(token, actor, expires)
    return actor


class HubApi:
    """Request handlers; framework-neutral aiohttp handlers that Faust views delegate to."""

    def __init__(self, hub: HubProvider, settings: Settings) -> None:
        self._hub = hub
        self._settings = settings
        self._verified = VerifiedTokens()

    @guarded
    async def peek(self, request: web.Request, domain: str | None = None) -> web.Response:
        actor = actor_from_request(request, self._settings, self._verified)
        domains = parse_domains(domain)
        check_query(request, "bundleId")
        bundle_id = parse_bundle_id(request.query.get("bundleId"))
        bundle = await (await self._hub()).peek(actor, domains, bundle_id)
        if bundle is None:
            return web.Response(status=204)
        return json_response(bundle_wire(bundle))

    @guarded
    async def dequeue(self, request: web.Request) -> web.Response:
        actor = actor_from_request(request, self._settings, self._verified)
        check_query(request, "bundleId", "peek")
        bundle_id = parse_bundle_id(request.query.get("bundleId"))
        if bundle_id is None:
            raise InvalidInput("query parameter bundleId is required")
        hub = await self._hub()
        peek = request.query.get("peek")
        if peek is None:
            await hub.dequeue(actor, bundle_id)
            return json_response(dequeued_wire(bundle_id, None))
        following = await hub.dequeue_and_peek(actor, bundle_id, parse_peek(peek))
        return json_response(dequeued_wire(bundle_id, following))

    def routes(self) -> list[web.RouteDef]:
        """The same handlers as plain aiohttp routes (used by tests and embedders)."""

        async def peek_domain(request: web.Request) -> web.StreamResponse:
            return await self.peek(request, request.match_info["domain"])

        return [
            web.get("/api/peek", self.peek),
            web.get("/api/peek/{domain}", peek_domain),
            web.delete("/api/dequeue", self.dequeue),
        ]


class HubHolder:
    """Opens the MessageHub on first use (inside the worker's event loop) and closes it on stop."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._hub: MessageHub | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> MessageHub:
        if self._hub is None:
            async with self._lock:
                if self._hub is None:
                    self._hub = await MessageHub.open(self._settings)
        return self._hub

    async def close(self) -> None:
        if self._hub is not None:
            hub, self._hub = self._hub, None
            await hub.close()


def register_views(app: Any, api: HubApi) -> None:
    """Mount the actor API on the Faust web server."""

    async def peek(self: Any, request: web.Request) -> web.StreamResponse:
        return await api.peek(request)

    async def peek_domain(self: Any, request: web.Request, domain: str) -> web.StreamResponse:
        return await api.peek(request, domain)

    async def dequeue(self: Any, request: web.Request) -> web.StreamResponse:
        return await api.dequeue(request)

    app.page("/api/peek", name="hub_peek")(type("HubPeekView", (View,), {"get": peek}))
    app.page("/api/peek/{domain}", name="hub_peek_domain")(
        type("HubPeekDomainView", (View,), {"get": peek_domain})
    )
    app.page("/api/dequeue", name="hub_dequeue")(type("HubDequeueView", (View,), {"delete": dequeue}))
