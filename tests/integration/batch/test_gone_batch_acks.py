"""Acks of a batch that is gone hold nobody, through the real worker and ack topic: batch A (one
item) is closed and expired, then 20 ack records naming A's item and one acking batch B's only
item go to the same partition. Each of A's records is dead-lettered at once with its reason (it
was re-queued every 0.5 s for 15 s before, holding B behind it: B read complete after ~20 s),
nothing is re-queued, and B completes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from app.batch.client import BatchClient, calls
from app.batch.errors import BatchNotFound
from tests.integration.batch.conftest import PARTITIONS, BatchWorker, live_and_gone, send_acks, wait_for

pytestmark = pytest.mark.integration
GONE_RECORDS = 20


def records_of(bootstrap: str, topic: str, partition: int) -> list[tuple[bytes, dict[str, bytes]]]:
    """Every record of one partition so far (value, headers)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time_ns()}", "enable.partition.eof": True}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[bytes, dict[str, bytes]]] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return out
            out.append((msg.value() or b"", dict(msg.headers() or [])))
        raise AssertionError(f"{topic}[{partition}]: no end of partition within 10 s")
    finally:
        consumer.close()


def test_acks_of_a_gone_batch_are_dead_lettered_at_once(
    batch_worker: BatchWorker, batch_client: Callable[[str], BatchClient]
) -> None:
    client = batch_client(batch_worker.url)
    created = [client.create_exact() for _ in range(PARTITIONS + 1)]  # round robin: two share one
    a, b = created[0], created[PARTITIONS]
    assert a % PARTITIONS == b % PARTITIONS, f"batches {a} and {b} in one partition"
    [gone_item] = client.add_item_ids(a, 1)
    [b_item] = client.add_item_ids(b, 1)
    client.close_exact(a)
    removed = client.delete_expired(closed=True, since=datetime.now(UTC) + timedelta(minutes=1))
    assert removed["batchesRemoved"] >= 1
    assert client.close_exact(b) is False, "B waits for its item"

    env = batch_worker.env
    acks_topic, partition = env["BATCH_ACKS_TOPIC"], a % PARTITIONS
    before = len(records_of(env["KAFKA_BOOTSTRAP"], acks_topic, partition))
    started = time.monotonic()
    for _ in range(GONE_RECORDS):
        assert send_acks(env, [gone_item]) == 1
    send_acks(env, [b_item])
    wait_for(lambda: client.get_exact(b)["isComplete"], 60, "batch B complete")
    took_s = time.monotonic() - started
    print(f"B complete {took_s:.2f} s after the first of {GONE_RECORDS} acks of the gone batch")

    dead = records_of(env["KAFKA_BOOTSTRAP"], f"{acks_topic}-dlq", 0)
    mine = [(v, h) for v, h in dead if orjson.loads(v) == {"batchItemIds": [gone_item]}]
    assert len(mine) == GONE_RECORDS, "each record of the gone batch dead-lettered"
    assert all(b"no longer exists" in h["reason"] for _, h in mine)
    after = records_of(env["KAFKA_BOOTSTRAP"], acks_topic, partition)
    assert len(after) - before == GONE_RECORDS + 1, "nothing re-queued behind the partition's acks"


def test_an_http_ack_applies_its_valid_ids_and_answers_the_others_one_by_one(
    batch_worker: BatchWorker, batch_client: Callable[[str], BatchClient]
) -> None:
    """Before, one unknown id failed the whole request (404) and nothing of it was applied."""
    client = batch_client(batch_worker.url)
    live, live_items, gone_item = live_and_gone(client, 2)
    bogus = f"{live}:{uuid.uuid4()}:0"
    answer = client.send(calls.ack([*live_items, gone_item, bogus]))
    assert answer["batchCompletions"] == [{"batchId": live, "userKey": None}], "the valid ids applied"
    reasons = {r["itemId"]: r["reason"] for r in answer["refusedItemIds"]}
    assert reasons.keys() == {gone_item, bogus}
    errors = {r["itemId"]: r["error"] for r in answer["refusedItemIds"]}
    assert errors == {gone_item: "BatchNotFound", bogus: "ItemNotFound"}
    assert "no longer exists" in reasons[gone_item] and "does not exist" in reasons[bogus]
    with pytest.raises(BatchNotFound, match="no item applied"):  # none applies: 404, as before
        client.ack([gone_item])
