"""The DLQ as the operator sees it after resolving dead letters, through the CLI against one
`hubstream worker`: a block_group group's dead letter and its followers in DLQ, then either
`dlq unsideline` (the records show `replayed`) or `reset-offset --queue dlq` (the records show
`discarded`, and the group's later messages are delivered again); in both, the DLQ depth counts
only the records still parked.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import Status
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    dead_letter_seqs,
    started_http_subscription,
)
from tests.integration.subscription.inprocess import wait_until

GROUPS = [f"g{i}" for i in range(6)]
MESSAGES = 60
BLOCKED = "g3"


async def _blocked_then_stopped(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, name: str, port: int
) -> tuple[SubscriptionRegistry, dict[str, list[int]]]:
    """BLOCKED's third message answers 404: it and the group's later ones wait in DLQ, the rest is
    delivered; then the subscription is stopped (the worker goes on running)."""
    _sub, registry = started_http_subscription(stack, metadata, workers, endpoint, name, 0.1)
    produced: dict[str, list[int]] = {g: [] for g in GROUPS}
    with CompositeProducer(stack, name, store=metadata) as producer:
        for seq in range(MESSAGES):
            g = GROUPS[seq % len(GROUPS)]
            producer.produce(g, f"{g}:{seq}")
            produced[g].append(seq)
    endpoint.broken = {str(produced[BLOCKED][2])}
    proc = workers.start(port)
    dead = produced[BLOCKED][2:]

    def settled() -> bool:
        assert proc.poll() is None, "worker died; see its log in the test's tmp dir"
        delivered = sum(map(len, endpoint.delivered.values()))
        return delivered == MESSAGES - len(dead) and dead_letter_seqs(metadata, registry, name) == dead

    await wait_until(settled, 90, "the blocked group in DLQ, the rest delivered")
    ops.set_status(registry, name, Status.STOPPED)
    await asyncio.to_thread(ops.wait_stopped, registry, name, 30.0)
    return registry, produced


async def _cli(workers: Workers, *args: str) -> Any:
    return await asyncio.to_thread(workers.cli, "subscription", *args)


async def _statuses(workers: Workers, name: str, *extra: str) -> list[tuple[int, str]]:
    """(seq, status) of each listed DLQ record, by seq."""
    listed = await _cli(workers, "dlq", "list", name, *extra)
    return sorted((int(e["payload"].split(":")[1]), e.get("status", "?")) for e in listed)


async def _depth(workers: Workers, name: str) -> int:
    return int((await _cli(workers, "describe", name))["dlq_depth"])


async def test_unsidelined_records_show_replayed_and_leave_the_depth(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    name = f"subdu-{unique}"
    registry, produced = await _blocked_then_stopped(
        stack, metadata, workers, endpoint, name, 17000 + int(unique[:4], 16) % 800
    )
    try:
        dead = produced[BLOCKED][2:]
        assert await _depth(workers, name) == len(dead)
        endpoint.broken = set()
        report = await _cli(workers, "dlq", "unsideline", name, "--all")
        assert report["replayed"] == len(dead)
        # before the change: the depth stayed at every record written, the listing had no status
        assert await _depth(workers, name) == 0
        assert await _statuses(workers, name) == [(s, "replayed") for s in dead]
        assert await _statuses(workers, name, "--status", "parked") == []
        assert await _statuses(workers, name, "--status", "discarded") == []
        ops.set_status(registry, name, Status.RUNNING)
        await wait_until(
            lambda: endpoint.delivered[BLOCKED] == produced[BLOCKED], 60, "the replays delivered in order"
        )
        assert await _statuses(workers, name, "--status", "replayed") == [(s, "replayed") for s in dead]
    finally:
        registry.close()


async def test_dlq_fast_forward_discards_and_unblocks_the_group(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    name = f"subdf-{unique}"
    registry, produced = await _blocked_then_stopped(
        stack, metadata, workers, endpoint, name, 17800 + int(unique[:4], 16) % 800
    )
    try:
        dead = produced[BLOCKED][2:]  # alone in DLQ: at offsets 0.. of one partition
        # part of them: the group stays blocked by the rest
        part = await _cli(
            workers, "reset-offset", name, "--queue", "dlq", "--storage-idx", "0", "--offset", "3"
        )
        assert part.get("discarded") == 3
        assert await _statuses(workers, name) == [
            (s, "discarded" if i < 3 else "parked") for i, s in enumerate(dead)
        ]
        assert await _depth(workers, name) == len(dead) - 3
        rest = await _cli(
            workers, "reset-offset", name, "--queue", "dlq", "--storage-idx", "0", "--offset", "1000000"
        )
        ops.set_status(registry, name, Status.RUNNING)
        later = [MESSAGES, MESSAGES + 1, MESSAGES + 2]
        with CompositeProducer(stack, name, store=metadata) as producer:
            for seq in later:
                producer.produce(BLOCKED, f"{BLOCKED}:{seq}")
        # before the change the group stayed blocked: its later messages followed to DLQ
        await wait_until(
            lambda: endpoint.delivered[BLOCKED][-3:] == later, 60, "the unblocked group's later messages"
        )
        assert rest.get("discarded") == len(dead) - 3
        assert endpoint.delivered[BLOCKED] == [*produced[BLOCKED][:2], *later]  # nothing replayed
        assert await _statuses(workers, name) == [(s, "discarded") for s in dead]
        assert await _statuses(workers, name, "--status", "parked") == []
        assert await _depth(workers, name) == 0
        for g in GROUPS:
            if g != BLOCKED:
                assert endpoint.delivered[g] == produced[g]
    finally:
        registry.close()
