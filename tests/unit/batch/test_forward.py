"""A request forwarded to the partition's owner that dies with the request on its connection is a
503 PartitionNotReady (the caller retries), not an unhandled 500."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from app.batch.errors import PartitionNotReady
from app.batch.views import BatchApi


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")  # the request arrived; the owner dies before answering
    writer.close()


async def test_owner_hanging_up_is_partition_not_ready() -> None:
    server = await asyncio.start_server(_hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with aiohttp.ClientSession() as session, server:
        service: Any = SimpleNamespace(
            settings=SimpleNamespace(batch_route_timeout_s=5.0), app=SimpleNamespace(http_client=session)
        )
        request = make_mocked_request("GET", "/api/v1/batch/exact/7")
        with pytest.raises(PartitionNotReady, match="did not answer"):
            await BatchApi(service)._forward(f"http://127.0.0.1:{port}", request, None)
