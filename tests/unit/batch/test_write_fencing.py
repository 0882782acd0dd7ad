"""A batch write answered while the table was rebalanced gets a 503 (the client retries at the
partition's new owner), not a 2xx: the new owner may have restored the partition before the write
reached the changelog, and would never know of it (seen as acks refused with BatchNotFound for a
batch the client was told exists)."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from app.batch.views import _method


class Service:
    def __init__(self) -> None:
        self.revocations = 0

    async def flush(self) -> None:
        return None


async def test_a_write_that_raced_a_rebalance_is_answered_503() -> None:
    service = Service()

    async def create(request: web.Request, **_: Any) -> web.StreamResponse:
        service.revocations += 1  # partitions revoked while the write was on its way
        return web.json_response({"id": 9}, status=201)

    view = _method(create, service)  # type: ignore[arg-type]
    answer = await view(None, make_mocked_request("POST", "/api/v1/batch/exact"))
    assert answer.status == 503
    assert "rebalanced" in orjson.loads(answer.body)["reason"]  # type: ignore[attr-defined]


async def test_a_write_without_a_rebalance_and_any_read_are_answered_as_they_are() -> None:
    service = Service()

    async def create(request: web.Request, **_: Any) -> web.StreamResponse:
        return web.json_response({"id": 9}, status=201)

    async def get(request: web.Request, **_: Any) -> web.StreamResponse:
        service.revocations += 1
        return web.json_response({"id": 9})

    assert (await _method(create, service)(None, make_mocked_request("POST", "/x"))).status == 201  # type: ignore[arg-type]
    assert (await _method(get, service)(None, make_mocked_request("GET", "/x"))).status == 200  # type: ignore[arg-type]
