"""A second copy joining a running one, on the real broker: the rebalance revokes every
partition (range assignment is eager), yet the partitions the first copy keeps go on under the
lease it had, without being drained, handed back and claimed again; the partitions that move
are drained and committed before the new copy reads them, so nothing is handled twice."""

from __future__ import annotations

import asyncio

import pytest

from app.consumer import ConsumerSettings, KeyedConsumer, Message
from app.kafka.broker import broker_for
from app.settings import Settings
from tests.integration.consumer.helpers import check_outcome, dead_lettered, fill, parse, wait_until

pytestmark = pytest.mark.integration

KEYS, PER_KEY, PARTITIONS = 400, 5, 4


async def test_a_copy_joining_moves_only_the_partitions_it_takes(kafka: Settings, unique: str) -> None:
    topic, name = f"reb-{unique}", f"reb-{unique}"
    total = fill(kafka.bootstrap, topic, PARTITIONS, KEYS, PER_KEY)
    handled: list[tuple[str, int]] = []

    async def handle(message: Message) -> None:
        await asyncio.sleep(0.003)
        handled.append(parse(message.value))

    settings = ConsumerSettings(
        name=name, topic=topic, bootstrap=kafka.bootstrap, concurrency=8, heartbeat_s=0.5
    )
    first = KeyedConsumer(settings, handle, member_id="first")
    second = KeyedConsumer(settings, handle, member_id="second")
    tasks = [asyncio.create_task(first.run())]
    await wait_until(lambda: len(handled) >= total // 5, 120, "a fifth handled by the first copy")
    epochs = {p: lease.epoch for p, lease in first._leases.items()}
    assert sorted(epochs) == list(range(PARTITIONS))
    tasks.append(asyncio.create_task(second.run()))
    await wait_until(
        lambda: bool(first.heartbeat().partitions) and bool(second.heartbeat().partitions),
        60,
        "the copies sharing the partitions",
    )
    kept = set(first.heartbeat().partitions)
    assert kept and kept < set(range(PARTITIONS))
    now = {p: first._leases[p].epoch for p in kept}
    assert now == {p: epochs[p] for p in kept}, f"kept partitions were claimed again: {epochs} -> {now}"
    await wait_until(lambda: len(set(handled)) >= total, 120, "every record handled")
    for copy in (first, second):
        copy.stop()
    await asyncio.gather(*tasks)
    dead = await asyncio.to_thread(dead_lettered, broker_for(kafka), name)
    duplicates = check_outcome(handled, dead, KEYS, PER_KEY)
    assert duplicates == 0, "moved partitions were drained and committed first: nothing is handled twice"
