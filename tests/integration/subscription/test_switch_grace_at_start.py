"""A shard (re)started right after a produce-pointer switch does not leave the storage topic the
pointer just left while producers holding the old definition may still write it (the switch grace,
measured from the switch the definition records). Before, only the running shard waited the
grace: a restart skipped the drained topic at once, and what a stale producer wrote there next was
never delivered. The same holds when the switching host's clock runs behind the reader's."""

from __future__ import annotations

import time

import pytest

from app.composite.model import CompositeTopic
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings
from tests.integration.subscription.inprocess import (
    GROUPS,
    Recorder,
    callable_subscription,
    produce,
    running_shards,
    wait_until,
)
from tests.support.soak import first_in_every_suite


class _Stale:
    """A producer's view of the metadata that has not refreshed since before the switch."""

    def __init__(self, topic: CompositeTopic) -> None:
        self.topic = topic

    def get(self, name: str) -> CompositeTopic:
        return self.topic

    def close(self) -> None:
        """Nothing to close."""


# The skewed clock runs under -m soak (the skew allowance has unit tests on both of its sides).
@pytest.mark.parametrize("switcher_behind_s", first_in_every_suite([0, 20], keep=1))
async def test_a_restart_right_after_a_switch_still_reads_what_stale_producers_write(
    stack: Settings, metadata: MetadataStore, unique: str, switcher_behind_s: int
) -> None:
    """With `switcher_behind_s`, the host that switches has a clock that many seconds behind this
    one (beyond the grace, within COMPOSITE_CLOCK_SKEW_S): the switch it records looks older than
    it is."""
    topic = f"grace-{unique}"
    metadata.create(topic, 2)
    produce(stack, metadata, topic, range(20))
    sub = callable_subscription(stack, metadata, unique, f"grace-{unique}", topic, shard_count=1)
    endpoint = Recorder()

    async with running_shards(stack, sub, metadata, endpoint):
        await wait_until(lambda: endpoint.count() >= 20, 60, "the first storage topic delivered")
    before = metadata.get(topic)
    metadata.add_storage_topic(topic, 2)
    metadata.put(metadata.get(topic).switch_produce(int(time.time() * 1000) - switcher_behind_s * 1000))
    # The shard starts again at once; a producer that has not seen the switch writes the old topic
    # within the grace, as producers refreshing the definition do (the shard decides its start-up
    # skip only once the grace has passed on its own clock; at once, before, with a skewed clock).
    async with running_shards(stack, sub, metadata, endpoint) as (runner,):
        await wait_until(lambda: runner._consumer is not None, 60, "the shard starting")
        with CompositeProducer(stack, topic, store=_Stale(before)) as stale:  # type: ignore[arg-type]
            for seq in range(20, 30):
                g = GROUPS[seq % len(GROUPS)]
                stale.produce(g, f"{g}:{seq}")
        produce(stack, metadata, topic, range(30, 40))  # and one that has, the new topic
        await wait_until(lambda: endpoint.count() >= 40, 60, "every message of both storage topics delivered")
    for g, seqs in endpoint.delivered.items():
        assert seqs == sorted(seqs), f"{g}: {seqs}"
    assert sorted(s for v in endpoint.delivered.values() for s in v) == list(range(40))
