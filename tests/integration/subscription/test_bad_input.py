"""Bad input on the real broker: records without a usable group id, RQ records without hs-* headers
and payloads the endpoint rejects as invalid go to DLQ with the reason in headers (error class,
message, source topic[partition]@offset); the shard keeps delivering everything else in order.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict
from collections.abc import Sequence

import orjson
import pytest
from confluent_kafka import Producer

from app.composite.producer import CompositeProducer
from app.composite.routing import group_hash
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import OnDlq, RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import EndpointRejected, NotAttempted
from app.subscription.model import EndpointSpec
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import running_shards, wait_until


class JsonSink:
    """Takes JSON objects; anything else is rejected as invalid (permanently)."""

    def __init__(self) -> None:
        self.delivered: dict[str, list[int]] = defaultdict(list)

    def take(self, m: SubscriptionMessage) -> BaseException | None:
        try:
            body = orjson.loads(m.payload)
        except orjson.JSONDecodeError as exc:
            return EndpointRejected(f"payload of {m.message_id} is not JSON: {exc}")
        self.delivered[m.group_id].append(int(body["seq"]))
        return None

    async def one(self, m: SubscriptionMessage) -> None:
        err = self.take(m)
        if err is not None:
            raise err

    async def many(self, messages: Sequence[SubscriptionMessage]) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        failed: set[str] = set()
        for m in messages:
            err = NotAttempted("after a failure") if m.group_id in failed else self.take(m)
            if err is not None:
                failed.add(m.group_id)
            out.append(err)
        return out


@pytest.mark.parametrize("kind", ["callable", "batch"])
async def test_bad_records_go_to_dlq_with_reasons_and_the_shard_goes_on(
    stack: Settings, metadata: MetadataStore, unique: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.subscription.delivery")
    topic = f"subbad-{unique}"
    metadata.create(topic, 2)
    storage = metadata.get(topic).storage_topics[0]
    groups = [f"g{i}" for i in range(8)]
    produced: dict[str, list[int]] = {g: [] for g in groups}
    raw = Producer({"bootstrap.servers": stack.bootstrap})
    bad_seq = 37  # its payload is not JSON
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(200):
            g = groups[seq % len(groups)]
            if seq == 50:  # undecodable: no key; then a key that is not UTF-8
                raw.produce(storage.name, value=b"no key", partition=0)
                raw.produce(storage.name, key=b"\xff\xfe", value=b"bad key", partition=1)
                raw.flush(10)
            producer.produce(g, b"{oops" if seq == bad_seq else orjson.dumps({"seq": seq}))
            produced[g].append(seq)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        f"subbad-{unique}",
        topic,
        EndpointSpec(kind, "json"),
        retry=RetryPolicy(max_attempts=3, min_backoff_s=0.1, max_backoff_s=0.2),
        on_dlq=OnDlq.SKIP_FAILED,
    )
    # an RQ record without hs-* headers (written by hand, not by a shard)
    rq = metadata.get(sub.rq_topic).storage_topics[0]
    raw.produce(rq.name, key=b"g0", value=b"junk", partition=rq.route(group_hash("g0")))
    raw.flush(10)
    sink = JsonSink()
    expected = sum(len(v) for v in produced.values()) - 1
    async with running_shards(
        stack,
        sub,
        metadata,
        endpoint=sink.one if kind == "callable" else None,
        batch_sink=sink.many if kind == "batch" else None,
    ) as runners:
        await wait_until(lambda: sum(map(len, sink.delivered.values())) >= expected, 60, "deliveries")
        await wait_until(lambda: runners[0].stats.dead_lettered >= 4, 20, "dead letters")
        assert all(not r.stopping.is_set() for r in runners)
    bad_group = groups[bad_seq % len(groups)]
    for g in groups:
        assert sink.delivered[g] == [s for s in produced[g] if s != bad_seq], g
    dlq = await asyncio.to_thread(ops.dlq_list, stack, metadata, sub)
    by_reason: dict[str, list[dict[str, object]]] = defaultdict(list)
    for e in dlq:
        by_reason[str(e["reason"])].append(e)
    assert sorted(by_reason) == ["failed", "undecodable"]
    undecodable_sources = sorted(str(e["source"]) for e in by_reason["undecodable"])
    assert len(undecodable_sources) == 3
    assert {str(e["error_class"]) for e in by_reason["undecodable"]} == {"UndecodableMessage"}
    assert any(s.startswith(f"{storage.name}[0]@") for s in undecodable_sources)
    assert any(s.startswith(f"{storage.name}[1]@") for s in undecodable_sources)
    assert any(s.startswith(f"{rq.name}[") for s in undecodable_sources)
    (rejected,) = by_reason["failed"]
    assert rejected["group_id"] == bad_group
    assert rejected["error_class"] == "EndpointRejected"
    assert "is not JSON" in str(rejected["error"])
    assert rejected["payload"] == "{oops"
    assert rejected["failed_attempts"] == 1  # invalid payloads are not retried
    source_topic, rest = str(rejected["source"]).split("[")
    assert source_topic == storage.name and rest.split("]@")[0] == str(storage.route(group_hash(bad_group)))
    # every dead letter is logged where it was read: `topic[partition] offset=N`
    where = re.compile(r"^\S+\[\d+\] offset=\d+: ")
    dlq_logs = [r.getMessage() for r in caplog.records if "DLQ" in r.getMessage()]
    assert len(dlq_logs) == len(dlq) and all(where.match(m) for m in dlq_logs), dlq_logs
    assert any(m.startswith(f"{storage.name}[") and f"group {bad_group} to DLQ" in m for m in dlq_logs)
