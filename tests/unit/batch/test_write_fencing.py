"""A batch write answered while the table was rebalanced gets a 503 (the client retries at the
partition's new owner), not a 2xx: the new owner may have restored the partition before the write
reached the changelog, and would never know of it (seen as acks refused with BatchNotFound for a
batch the client was told exists)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from app.batch.errors import PartitionNotReady
from app.batch.service import BatchService
from app.batch.views import BatchApi, _method
from app.settings import Settings


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
    assert "rebalanced" in orjson.loads(answer.body)["reason"]


async def test_a_write_without_a_rebalance_and_any_read_are_answered_as_they_are() -> None:
    service = Service()

    async def create(request: web.Request, **_: Any) -> web.StreamResponse:
        return web.json_response({"id": 9}, status=201)

    async def get(request: web.Request, **_: Any) -> web.StreamResponse:
        service.revocations += 1
        return web.json_response({"id": 9})

    assert (await _method(create, service)(None, make_mocked_request("POST", "/x"))).status == 201  # type: ignore[arg-type]
    assert (await _method(get, service)(None, make_mocked_request("GET", "/x"))).status == 200  # type: ignore[arg-type]


class App:
    rebalancing = False
    in_recovery = False


def test_no_table_write_is_issued_while_a_rebalance_is_under_way() -> None:
    """A write issued during a rebalance could reach the changelog after the partition's new owner
    restored it (a zombie write the new owner never sees): the partition is not served from the
    rebalance's start until the recovery after it ended. The reaper skips, it does not fail."""
    app = App()
    service = BatchService(app, None, Settings())  # type: ignore[arg-type]  # no table: serving never reads one
    service.mark_ready([0, 1])
    app.rebalancing = True
    assert not service.serving(0)
    with pytest.raises(PartitionNotReady):
        service.store(0)
    assert service.reap().batches_removed == 0
    app.rebalancing = False
    assert service.serving(0) and not service.serving(2)


async def test_the_status_reports_a_partition_served_only_when_a_request_for_it_would_be() -> None:
    """A worker's partitions are reported served once a write to them would be taken: before, the
    status listed an assigned partition during its recovery or a rebalance, and a client that
    waited for it was answered 503 PartitionNotReady on its first write."""
    app = App()
    service = BatchService(app, None, Settings())  # type: ignore[arg-type]
    service.owner_urls = dict  # type: ignore[method-assign]  # no router here: no other owners
    service.mark_ready([0, 1])
    api = BatchApi(service)

    async def served() -> list[int]:
        answer = await api.status(make_mocked_request("GET", "/api/v1/batch/status"))
        return list(orjson.loads(answer.body)["partitionsServed"])  # type: ignore[arg-type]

    app.rebalancing = True
    assert await served() == []
    app.rebalancing = False
    assert await served() == [0, 1]
