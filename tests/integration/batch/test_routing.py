"""Two workers of one app split the table partitions; a request reaching either worker is served by
the owner of the batch's partition. Also: acks through the Kafka ack topic (including a record
produced to the wrong partition and a bad record that goes to the dead-letter topic), and the reaper."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from app.batch.acks import AckProducer
from app.batch.client import BatchClient
from app.batch.errors import BatchNotFound
from app.settings import Settings
from tests.integration.batch.conftest import PARTITIONS, start_worker, wait_for, wait_serving, worker_env

pytestmark = [pytest.mark.integration]


def dead_letters(bootstrap: str, topic: str) -> list[tuple[bytes | None, dict[str, bytes]]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"dlq-{time.time_ns()}", "enable.partition.eof": True}
    )
    try:
        partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[tuple[bytes | None, dict[str, bytes]]] = []
        eof: set[int] = set()
        while len(eof) < len(partitions):
            msg = consumer.poll(5)
            if msg is None:
                break
            if msg.error():
                eof.add(msg.partition())
                continue
            out.append((msg.value(), {k: v for k, v in msg.headers() or []}))
        return out
    finally:
        consumer.close()


def test_two_workers_route_by_partition_owner(
    stack: Settings, unique: str, tmp_path: Path, batch_client: Callable[[str], BatchClient]
) -> None:
    env = worker_env(stack, unique, BATCH_REAP_OPEN_AFTER_S="8", BATCH_REAP_INTERVAL_S="0.5")
    workers = [start_worker(env, tmp_path / "a")]
    try:
        wait_serving(workers)
        workers.append(start_worker(env, tmp_path / "b"))
        wait_serving(workers)
        a, b = workers
        served = {w.url: set(w.status()["partitionsServed"]) for w in workers}
        assert all(served.values()), f"both workers should serve partitions: {served}"
        via_a, via_b = batch_client(a.url), batch_client(b.url)

        # Batches created on each worker live in that worker's partitions; use them through the other.
        batch_of_b = via_b.create_exact(user_key="b")
        assert batch_of_b % PARTITIONS in served[b.url]
        items = via_a.add_item_ids(batch_of_b, 3000)
        assert via_a.close_exact(batch_of_b) is False
        assert via_a.ack(items[:-1]) == []
        assert via_b.get_exact(batch_of_b)["pendingItems"] == 1
        assert via_a.ack(items) == [{"batchId": batch_of_b, "userKey": "b"}]
        assert via_b.get_exact(batch_of_b)["isComplete"] is True

        # One ack request naming batches owned by both workers.
        batch_of_a = via_a.create_exact()
        items_a, items_b = via_b.add_item_ids(batch_of_a, 100), via_a.add_item_ids(via_b.create_exact(), 100)
        batch_b2 = int(items_b[0].split(":")[0])
        via_b.close_exact(batch_of_a)
        via_a.close_exact(batch_b2)
        completed = via_a.ack(items_a + items_b)
        assert sorted(c["batchId"] for c in completed) == sorted([batch_of_a, batch_b2])

        estimated = via_b.create_estimated(2)
        assert via_a.decr({estimated: 2})[0]["isComplete"] is False
        assert via_a.close_estimated(estimated) is True

        # Kafka acks: a record keyed by batch id but produced to a wrong partition is forwarded.
        batch_k = via_a.create_exact()
        items_k = via_b.add_item_ids(batch_k, 5000)
        via_b.close_exact(batch_k)
        producer = AckProducer(stack.bootstrap, env["BATCH_ACKS_TOPIC"], PARTITIONS)
        producer.send(items_k[:-10])
        assert producer.flush() == 0
        raw = Producer({"bootstrap.servers": stack.bootstrap})
        wrong = (batch_k + 1) % PARTITIONS
        raw.produce(
            env["BATCH_ACKS_TOPIC"], orjson.dumps({"batchItemIds": items_k[-10:]}), str(batch_k), wrong
        )
        raw.produce(env["BATCH_ACKS_TOPIC"], b"{not json", b"x", 0)
        raw.produce(env["BATCH_ACKS_TOPIC"], orjson.dumps({"batchItemIds": ["1:2:3"]}), b"1", 1)
        assert raw.flush(10) == 0
        wait_for(lambda: via_a.get_exact(batch_k)["isComplete"], what="Kafka acks complete the batch")
        letters = wait_for(
            lambda: len(got := dead_letters(stack.bootstrap, env["BATCH_ACKS_TOPIC"] + "-dlq")) >= 2 and got,
            what="two dead letters",
        )
        reasons = sorted(headers["reason"].decode() for _, headers in letters)
        assert any("JSONDecodeError" in r for r in reasons) and any("'1:2:3'" in r for r in reasons), reasons

        # The reaper expires an open batch after BATCH_REAP_OPEN_AFTER_S; closed ones stay.
        doomed = via_b.create_exact()
        via_b.add_items(doomed, 10)

        def reaped() -> bool:
            try:
                via_a.get_exact(doomed)
            except BatchNotFound:
                return True
            return False

        wait_for(reaped, timeout_s=30, what="reaper removes the open batch")
        assert via_a.get_exact(batch_k)["isClosed"] is True
    finally:
        for worker in workers:
            worker.stop()
