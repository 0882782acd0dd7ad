"""A pipeline process killed (SIGKILL) at each of its writes: to MySQL, to Cosmos DB, to Kafka, and
of its control records (writer offsets, reader positions). Restarted on the same home, every
source message reaches every writer, in order per key, as each writer's sink shows it: MySQL and
Cosmos hold each row's newest version, and the Kafka topic, taking each record's last copy, has
each key's versions in source order. The commit log's append is cut too: between the records of one
batch, part of it in the log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest
from confluent_kafka import Consumer, TopicPartition

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.cosmos import CosmosStore
from app.kafka.broker import broker_for
from app.settings import Settings, get_settings
from tests.support.waiting import async_wait_until

from .support import cli, start, stop

pytestmark = pytest.mark.integration

MESSAGES, ROWS = 600, 40  # each row is written 15 times: a late old version would show

CRASHES = [
    ("pipeline.writer.mysql.commit:3:kill", {}),  # a bulk written, not committed
    ("pipeline.writer.cosmos.upsert:100:kill", {}),  # part of a batch's documents upserted
    ("pipeline.writer.kafka.produce:3:kill", {}),  # a bulk about to be produced
    ("pipeline.control.send:1:kill", {}),  # writers wrote, their offsets are not saved
    # Records of at most ~1 KB: a batch of 50 entries is appended as several records, and the
    # kill comes once the second is in the log, the rest in flight or not yet sent.
    ("pipeline.log.record_confirmed:2:kill", {"MAX_PAYLOAD_BYTES": "1024"}),
]


def kafka_records(bootstrap: str, topic: str) -> list[dict[str, int]]:
    (end,) = broker_for(get_settings()).end_offsets([(topic, 0)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[dict[str, int]] = []
    try:
        while len(out) < end:
            for msg in consumer.consume(500, 1.0):
                assert msg.error() is None, msg.error()
                out.append(orjson.loads(msg.value()))
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("crash_at", "env"), [pytest.param(spec, env, id=spec.split(":")[0]) for spec, env in CRASHES]
)
async def test_a_pipeline_killed_at_a_write_delivers_every_message_to_every_writer(
    stack: Settings,
    metadata: MetadataStore,
    cosmos: CosmosStore,
    mysql: pymysql.connections.Connection[Any],
    unique: str,
    tmp_path: Path,
    crash_at: str,
    env: dict[str, str],
) -> None:
    name, source, table = f"plcp-{unique}", f"plcp-src-{unique}", f"plcp_{unique}"
    container, topic = f"plcp-{unique}", f"plcp-out-{unique}"
    metadata.create(source, 2)
    with mysql.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id VARCHAR(64) PRIMARY KEY, weight INT)")
    with CompositeProducer(stack, source, store=metadata) as producer:
        for i in range(MESSAGES):
            row = f"row-{i % ROWS}"
            producer.produce(row, {"id": row, "weight": i})
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 50\nreader: {{type: composite, topic: {source}}}\n"
        "writers:\n"
        f"  - {{name: db, type: mysql, table: {table}, columns: [id, weight]}}\n"
        f"  - {{name: docs, type: cosmos, container: {container}, database: {cosmos.database.id},"
        " partition_key: /id}\n"
        f"  - {{name: bus, type: kafka, topic: {topic}, key_field: id}}\n"
    )
    port = 19000 + int(unique[:4], 16) % 900
    crashed = start(file, tmp_path, port, HUBSTREAM_CRASH_AT=crash_at, **env)
    assert await asyncio.to_thread(crashed.wait, 120) == -9, "the crash point was not reached"
    proc = start(file, tmp_path, port, **env)
    newest = {f"row-{r}": max(i for i in range(MESSAGES) if i % ROWS == r) for r in range(ROWS)}
    target = await cosmos.container(container, "/id")

    def mysql_rows() -> dict[str, int]:
        with mysql.cursor() as cur:
            cur.execute(f"SELECT id, weight FROM `{table}`")
            return {r[0]: int(r[1]) for r in cur.fetchall()}

    async def docs() -> dict[str, int]:
        return {d["id"]: int(d["weight"]) async for d in target.read_all_items()}

    def caught_up() -> bool:
        """Every writer at the commit log's end: a replay after the crash has finished too (copies
        written before the crash can satisfy the sinks' checks while the replay is under way)."""
        done = cli("status", name, port=port)  # the live process's offsets, not the last flushed ones
        if done.returncode != 0:
            return False
        report = orjson.loads(done.stdout)
        writers = report["writers"]
        # Every writer named: with none known yet, "all at lag 0" would hold before the replay.
        return (
            report["commitLog"]["endOffset"] >= MESSAGES
            and set(writers) == {"db", "docs", "bus"}
            and all(w["lag"] == 0 for w in writers.values())
        )

    async def sinks_complete() -> list[dict[str, int]]:  # the topic's records, [] until complete
        # The sinks are read only once every writer is at the log's end, so that they show
        # the whole replay after the crash.
        if not await asyncio.to_thread(caught_up):
            return []
        bus = await asyncio.to_thread(kafka_records, stack.bootstrap, topic)
        done = (
            await asyncio.to_thread(mysql_rows) == newest
            and await docs() == newest
            and {r["weight"] for r in bus} >= set(range(MESSAGES))
        )
        return bus if done else []

    try:
        bus = await async_wait_until(
            sinks_complete, 150, "the writers to catch up after the restart", poll_s=0.25
        )
        assert proc.poll() is None, "the restarted pipeline must stay up"
    finally:
        stop(proc)
    last = {r["weight"]: i for i, r in enumerate(bus)}  # each record at its last copy
    for row in newest:
        weights = [w for w, _ in sorted(last.items(), key=lambda kv: kv[1]) if f"row-{w % ROWS}" == row]
        assert weights == sorted(weights), f"{row}: versions out of order on the Kafka topic"
