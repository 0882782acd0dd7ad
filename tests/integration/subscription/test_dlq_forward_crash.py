"""`reset-offset --queue dlq` cut at its writes (the point raises in the command's process, as a
refused or lost write would): before the groups' new states (`subscription.reset_offset.dlq_states`),
after them before the epoch bump (`subscription.registry.write`), or before the DLQ consumer
group's commit (`subscription.ops.commit`). The command fails; run again, it finishes: every dead
letter below the offset shows `discarded`, the DLQ depth is 0, and once started the subscription
delivers the formerly blocked group's new messages and none of the discarded ones."""

from __future__ import annotations

import asyncio

import pytest

from app import crashpoints
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import Status
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    dead_letter_seqs,
    started_http_subscription,
)
from tests.integration.subscription.inprocess import wait_until
from tests.support.soak import first_in_every_suite

GROUPS = [f"g{i}" for i in range(4)]
MESSAGES = 40
BLOCKED = "g1"


@pytest.mark.parametrize(
    "point",
    # the last two under `-m soak`: reset-offset is cut at both in test_admin_crash_points.py
    first_in_every_suite(
        ["subscription.reset_offset.dlq_states", "subscription.registry.write", "subscription.ops.commit"], 1
    ),
)
async def test_dlq_fast_forward_cut_at_its_writes_then_run_again(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str, point: str
) -> None:
    name = f"subdx-{unique}"
    _sub, registry = started_http_subscription(stack, metadata, workers, endpoint, name, 0.1)
    produced: dict[str, list[int]] = {g: [] for g in GROUPS}
    with CompositeProducer(stack, name, store=metadata) as producer:
        for seq in range(MESSAGES):
            g = GROUPS[seq % len(GROUPS)]
            producer.produce(g, f"{g}:{seq}")
            produced[g].append(seq)
    endpoint.broken = {str(produced[BLOCKED][1])}  # 404: to DLQ, the group's later ones follow
    dead = produced[BLOCKED][1:]
    try:
        proc = workers.start(18600 + int(unique[:4], 16) % 800)

        def settled() -> bool:
            assert proc.poll() is None, "worker died; see its log in the test's tmp dir"
            delivered = sum(map(len, endpoint.delivered.values()))
            return delivered == MESSAGES - len(dead) and dead_letter_seqs(metadata, registry, name) == dead

        await wait_until(settled, 90, "the blocked group in DLQ, the rest delivered")
        ops.set_status(registry, name, Status.STOPPED)
        await asyncio.to_thread(ops.wait_stopped, registry, name, 30.0)

        settings = workers.settings_of_workers()

        def forward() -> dict[str, object]:
            return ops.reset_offset(
                registry, metadata, name, "dlq", storage_idx=0, offset=1_000_000, settings=settings
            )

        with crashpoints.armed(point), pytest.raises(crashpoints.InjectedFault):
            await asyncio.to_thread(forward)
        report = await asyncio.to_thread(forward)
        # cut once the states were written, the re-run finds nothing left to give up
        assert report["discarded"] == (len(dead) if point == "subscription.reset_offset.dlq_states" else 0)
        listed = await asyncio.to_thread(ops.dlq_list, settings, metadata, registry.get(name))
        assert sorted((int(str(e["payload"]).split(":")[1]), e["status"]) for e in listed) == [
            (s, "discarded") for s in dead
        ]
        lag = await asyncio.to_thread(ops.lag_report, settings, registry, metadata, name)
        assert lag["dlq_depth"] == 0

        ops.set_status(registry, name, Status.RUNNING)
        with CompositeProducer(stack, name, store=metadata) as producer:
            producer.produce(BLOCKED, f"{BLOCKED}:{MESSAGES}")
        await wait_until(
            lambda: endpoint.delivered[BLOCKED][-1:] == [MESSAGES], 90, "the unblocked group's new message"
        )
        assert endpoint.delivered[BLOCKED] == [produced[BLOCKED][0], MESSAGES]  # nothing discarded came
    finally:
        registry.close()
