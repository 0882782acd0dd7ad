"""What a web page in a browser could send a worker, refused (app.web.browser_guard), and the reads
that need a token once an admin token is set (app.web.security.admin_middleware). Served by a
real aiohttp server on loopback with the worker's two middlewares in front of trivial handlers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from app.settings import Settings
from app.web.browser_guard import browser_guard
from app.web.security import admin_middleware

ADMIN = "a" * 32
READ = "r" * 32
JSON = {"Content-Type": "application/json"}


def settings_from(**env: Any) -> Settings:
    """Settings(**env), by the variables' names: the aliases, which the typed __init__ does not know."""
    return Settings(**env)


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def _app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=[browser_guard(settings), admin_middleware(settings)])
    for path in ("/api/v1/batch/exact", "/api/v1/batch/exact/1", "/metrics", "/api/dashboard", "/api/peek"):
        app.router.add_get(path, _ok)
        app.router.add_post(path, _ok)
    app.router.add_delete("/api/dequeue", _ok)
    return app


@pytest_asyncio.fixture
async def open_worker() -> AsyncIterator[TestClient[Any, Any]]:
    settings = settings_from(WEB_ADVERTISED_URL="http://worker-1:6066", WEB_ALLOWED_HOSTS="lb.example")
    async with TestClient(TestServer(_app(settings), host="127.0.0.1")) as client:
        yield client


@pytest_asyncio.fixture
async def guarded_worker() -> AsyncIterator[TestClient[Any, Any]]:
    settings = settings_from(HUBSTREAM_ADMIN_TOKEN=ADMIN, HUBSTREAM_READ_TOKEN=READ)
    async with TestClient(TestServer(_app(settings), host="127.0.0.1")) as client:
        yield client


async def _status(client: TestClient[Any, Any], method: str, path: str, **headers: str) -> int:
    async with client.request(
        method, path, data=b"{}" if method != "GET" else None, headers=headers
    ) as answer:
        if answer.status >= 400:
            body = await answer.json()
            assert body["error"] and body["reason"], body  # every refusal says why, in JSON
        return answer.status


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:6066",
        "localhost",
        "[::1]:6066",
        "10.1.2.3:6066",
        "worker-1:6066",
        "lb.example",
        "LB.example.",
    ],
)
async def test_a_host_naming_the_worker_is_served(open_worker: TestClient[Any, Any], host: str) -> None:
    assert await _status(open_worker, "GET", "/api/dashboard", Host=host) == 200
    assert await _status(open_worker, "POST", "/api/v1/batch/exact", Host=host, **JSON) == 200


@pytest.mark.asyncio
@pytest.mark.parametrize("host", ["evil.example", "evil.example:6066", "worker-1.evil.example", "", "a b"])
async def test_a_rebound_host_name_is_refused_for_reads_too(
    open_worker: TestClient[Any, Any], host: str
) -> None:
    assert await _status(open_worker, "GET", "/api/dashboard", Host=host) == 403
    assert await _status(open_worker, "GET", "/metrics", Host=host) == 403


@pytest.mark.asyncio
@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://10.9.9.9:6066", "file://"])
async def test_a_mutation_from_another_origin_is_refused(
    open_worker: TestClient[Any, Any], origin: str
) -> None:
    assert await _status(open_worker, "POST", "/api/v1/batch/exact", Origin=origin, **JSON) == 403
    assert await _status(open_worker, "GET", "/api/dashboard", Origin=origin) == 200  # reads: the Host rule


@pytest.mark.asyncio
@pytest.mark.parametrize("origin", ["http://127.0.0.1:6066", "http://localhost:8080", "http://worker-1:6066"])
async def test_a_mutation_from_the_workers_own_origin_is_served(
    open_worker: TestClient[Any, Any], origin: str
) -> None:
    assert await _status(open_worker, "POST", "/api/v1/batch/exact", Origin=origin, **JSON) == 200


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_a_mutation_a_cross_site_form_could_send_is_refused(
    open_worker: TestClient[Any, Any], content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    assert await _status(open_worker, "POST", "/api/v1/batch/exact", **headers) == 415
    assert (
        await _status(open_worker, "POST", "/api/v1/batch/exact", Authorization="Bearer x", **headers) == 200
    )
    assert (
        await _status(
            open_worker, "POST", "/api/v1/batch/exact", **{"Content-Type": "application/json; charset=utf-8"}
        )
        == 200
    )


@pytest.mark.asyncio
async def test_with_an_admin_token_reads_need_a_token_but_the_open_ones(
    guarded_worker: TestClient[Any, Any],
) -> None:
    for path in ("/api/dashboard", "/api/v1/batch/exact/1"):
        assert await _status(guarded_worker, "GET", path) == 401
        assert await _status(guarded_worker, "GET", path, Authorization="Bearer wrong") == 401
        assert await _status(guarded_worker, "GET", path, Authorization=f"Bearer {READ}") == 200
        assert await _status(guarded_worker, "GET", path, Authorization=f"Bearer {ADMIN}") == 200
    assert await _status(guarded_worker, "GET", "/metrics") == 200
    assert await _status(guarded_worker, "GET", "/api/peek") == 200  # actors: their JWT, checked by the view


@pytest.mark.asyncio
async def test_the_read_token_mutates_nothing(guarded_worker: TestClient[Any, Any]) -> None:
    read, admin = f"Bearer {READ}", f"Bearer {ADMIN}"
    assert await _status(guarded_worker, "POST", "/api/v1/batch/exact", Authorization=read, **JSON) == 401
    assert await _status(guarded_worker, "POST", "/api/v1/batch/exact", Authorization=admin, **JSON) == 200
    assert await _status(guarded_worker, "DELETE", "/api/dequeue", Authorization="Bearer actor-jwt") == 200
    assert await _status(guarded_worker, "DELETE", "/api/dequeue") == 200  # no JWT: the view's 401
