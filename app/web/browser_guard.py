"""What a web page in someone's browser could make of a worker's HTTP API, refused.

A page on any site can send a browser's request to a worker it can reach (one on loopback, or on
the page viewer's network): a cross-site form or `fetch(…, {mode: "no-cors"})` POSTs without
asking, and a DNS name rebound to the worker's address reads its answers. So, on every request:

- the Host must name this worker: an IP address, `localhost`, the host of WEB_ADVERTISED_URL, or
  one of WEB_ALLOWED_HOSTS (a rebound name is none of those);
- a mutating request (POST, PUT, PATCH, DELETE) with an Origin must come from one of those hosts
  or from the Host it was sent to (`null`, a sandboxed or local page, is refused);
- without an admin token, a POST needs `Content-Type: application/json` unless it carries an
  Authorization header: a browser sends neither across sites without a CORS preflight, which a
  worker never grants (PUT, PATCH and DELETE are preflighted whatever they carry; with an admin
  token every POST needs the token, which no form carries). Every hubstream client sends one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from app.errors import HubstreamError
from app.settings import Settings
from app.web.responses import error_response

__all__ = ["Forbidden", "UnsupportedMediaType", "allowed_hosts", "browser_guard"]

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Forbidden(HubstreamError):
    """The request names a host, or comes from an origin, that is not this worker's."""

    http_status = 403


class UnsupportedMediaType(HubstreamError):
    """A POST without a JSON body type (and without credentials)."""

    http_status = 415


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """Host names (not addresses: any address is fine) that name this worker."""
    names = {"localhost", *settings.web_allowed_hosts}
    advertised = urlsplit(settings.web_advertised_url or "").hostname
    if advertised:
        names.add(advertised)
    if not _is_address(settings.web_host):
        names.add(settings.web_host)
    return frozenset(name.lower().rstrip(".") for name in names if name)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _host_of(authority: str) -> str:
    """The host of a Host header value (`name:port`, `[v6]:port`), lower-cased; '' when malformed."""
    try:
        return (urlsplit(f"//{authority}").hostname or "").rstrip(".")
    except ValueError:
        return ""


def browser_guard(settings: Settings) -> Any:
    names = allowed_hosts(settings)
    # With an admin token every POST must carry it (app.web.security answers 401): no form can.
    forms_matter = settings.admin_token is None

    def ours(host: str) -> bool:
        return _is_address(host) or host in names

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        authority = request.headers.get("Host", "")
        host = _host_of(authority)
        if not host or not ours(host):
            return error_response(
                Forbidden(
                    f"Host {authority!r} does not name this worker: use its address or the host of "
                    "WEB_ADVERTISED_URL, or list the name in WEB_ALLOWED_HOSTS"
                )
            )
        if request.method not in MUTATING:
            return await handler(request)
        origin = request.headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin) if origin != "null" else None
            origin_host = ((parts.hostname or "") if parts else "").rstrip(".")
            same = parts is not None and parts.netloc.lower() == authority.lower()
            if not same and not (origin_host in names or _is_loopback_address(origin_host)):
                return error_response(Forbidden(f"{request.method} from origin {origin!r} is refused"))
        if (
            forms_matter
            and request.method == "POST"
            and "Authorization" not in request.headers
            and request.content_type != "application/json"
        ):
            return error_response(
                UnsupportedMediaType(
                    f"{request.method} {request.path} needs Content-Type: application/json "
                    f"(got {request.headers.get('Content-Type', 'none')!r})"
                )
            )
        return await handler(request)

    return guard


def _is_loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
