"""Dead-lettered ack records are listed and replayed, through the real worker and broker: a dead
letter whose ids can apply now completes its batch when replayed, one whose batch is gone is
dead-lettered again with its reason, and a replay cut after sending (crash point
`batch.dead_acks.replayed`) marks nothing, so the next replay sends the same records again and
nothing is counted twice."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from confluent_kafka import Producer

from app.batch.client import BatchClient
from app.batch.dead_acks import dead_acks, dead_acks_topic, replay_dead_acks
from app.crashpoints import InjectedFault, armed
from app.settings import Settings
from tests.integration.batch.conftest import PARTITIONS, BatchWorker, live_and_gone, wait_for

pytestmark = pytest.mark.integration


def dead_letter(settings: Settings, item_ids: list[str], reason: str) -> None:
    """A dead letter as the ack agent writes one."""
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    producer.produce(
        dead_acks_topic(settings),
        orjson.dumps({"batchItemIds": item_ids}),
        headers={"reason": reason.encode(), "source": b"acks[0] offset=0"},
    )
    assert producer.flush(10) == 0


def test_dead_acks_are_listed_and_replayed_once_they_can_apply(
    stack: Settings, batch_worker: BatchWorker, batch_client: Callable[[str], BatchClient]
) -> None:
    settings = stack.model_copy(
        update={"batch_acks_topic": batch_worker.env["BATCH_ACKS_TOPIC"], "table_partitions": PARTITIONS}
    )
    client = batch_client(batch_worker.url)
    live, live_items, gone_item = live_and_gone(client, 3)
    before = len(dead_acks(settings))
    dead_letter(settings, live_items, "BatchNotFound: batches not created in partition 1")
    dead_letter(settings, [gone_item], "BatchNotFound: a worker was down")
    listed = dead_acks(settings)[before:]
    assert [(d.item_ids, d.replayed) for d in listed] == [(tuple(live_items), False), ((gone_item,), False)]
    assert listed[0].reason.startswith("BatchNotFound") and listed[0].source == "acks[0] offset=0"

    with armed("batch.dead_acks.replayed", nth=1), pytest.raises(InjectedFault):
        replay_dead_acks(settings)  # sent, then cut before it marks them replayed
    assert not any(d.replayed for d in dead_acks(settings)[before:])
    replayed = replay_dead_acks(settings)
    assert replayed.records >= 2 and replayed.item_ids >= 4 and replayed.skipped == 0
    wait_for(lambda: client.get_exact(live)["isComplete"], 30, "the live batch completed by the replay")
    assert all(d.replayed for d in dead_acks(settings)[before : before + 2])

    def gone_again() -> bool:
        return any(
            d.item_ids == (gone_item,) and not d.replayed and "no longer exists" in d.reason
            for d in dead_acks(settings)[before + 2 :]
        )

    wait_for(gone_again, 30, "the gone batch's ack dead-lettered again with its reason")
    assert replay_dead_acks(settings).item_ids >= 1  # only what is new since
    assert client.get_exact(live)["isComplete"], "replaying twice counted nothing twice"
