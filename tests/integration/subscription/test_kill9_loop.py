"""Black-box kill -9 loop of the subscription platform, through the CLI and `hubstream worker`
processes only: a composite topic of 4 partitions, 2 shards, 2 workers, an HTTP endpoint that
answers 503 to about one attempt in ten (first three attempts of each message), 20,000 messages
over 500 groups produced in 10 chunks, one after another, while one worker at a time is
SIGKILLed and restarted at once, 6 times.

Counted at the endpoint: nothing missing, first deliveries in order, and no group ever sees an
older message after a newer one unless the whole run after it follows again; every group ends
on its newest message (an endpoint that upserts a group's latest value ends right).

Under `-m soak`: it runs about two minutes on two cores, and the in-suite kill tests (the worker
crash points, the acceptance test) already kill workers mid-delivery."""

from __future__ import annotations

import asyncio
import functools
import zlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from app.composite.store import MetadataStore
from app.settings import Settings
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    assert_group_order,
    produce_groups,
    serving,
)
from tests.support.waiting import async_wait_until

MESSAGES = 20_000
GROUPS = 500
CHUNKS = 10
KILLS = 6


class FlakyEndpoint(Endpoint):
    """503 for about one attempt in ten among each message's first three, chosen by a hash of
    the message id and the attempt (the same run fails the same attempts)."""

    async def handle(self, request: web.Request) -> web.Response:
        message_id = request.headers["X-Message-Id"]
        attempt = self.attempts[message_id] + 1
        if attempt <= 3 and zlib.crc32(f"{message_id}/{attempt}".encode()) % 10 == 0:
            self.attempts[message_id] = attempt
            await request.read()
            return web.Response(status=503)
        return await super().handle(request)


@pytest.fixture
async def flaky() -> AsyncIterator[Endpoint]:
    async with serving(FlakyEndpoint()) as ep:
        yield ep


def _distinct(endpoint: Endpoint) -> int:
    return sum(len(set(seqs)) for seqs in endpoint.delivered.values())


def _reached(endpoint: Endpoint, floor: int) -> bool:
    return _distinct(endpoint) >= floor


@pytest.mark.soak
async def test_kill9_loop_every_group_ends_on_its_newest_message(
    stack: Settings, metadata: MetadataStore, workers: Workers, flaky: Endpoint, unique: str
) -> None:
    name = f"k9loop-{unique}"
    workers.cli("topic", "create", name, "--partitions", "4")
    workers.cli(
        "subscription", "create", name, "--topic", name, "--http", flaky.url, "--shards", "2",
        "--max-attempts", "8", "--min-backoff-s", "0.2", "--max-backoff-s", "1",
    )  # fmt: skip
    base = 18000 + int(unique[:4], 16) % 900
    ports = (base, base + 1)
    for port in ports:
        workers.start(port)
    chunk = MESSAGES // CHUNKS

    def produce_chunks() -> None:
        for k in range(CHUNKS):
            produce_groups(stack, name, range(k * chunk, (k + 1) * chunk), GROUPS)

    producing = asyncio.create_task(asyncio.to_thread(produce_chunks))
    for k in range(KILLS):
        # each kill lands while messages flow: at the next share of the deliveries
        floor = (k + 1) * MESSAGES // (KILLS + 2)
        await async_wait_until(functools.partial(_reached, flaky, floor), 120, f"{floor} delivered")
        victim = ports[k % 2]
        workers.kill9(victim)
        workers.start(victim)
    await producing
    await async_wait_until(lambda: _distinct(flaky) >= MESSAGES, 240, f"all {MESSAGES} delivered")
    delivered = {seq for seqs in flaky.delivered.values() for seq in seqs}
    assert delivered == set(range(MESSAGES))
    assert_group_order(flaky, range(MESSAGES), GROUPS)
    repeats = sum(len(seqs) for seqs in flaky.delivered.values()) - MESSAGES
    print(f"kill9 loop: {MESSAGES} delivered, {repeats} repeated deliveries")
