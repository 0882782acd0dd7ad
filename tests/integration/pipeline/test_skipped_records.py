"""The composite reader yields every record of its partitions even when its Kafka client starts a
partition past where the reader asked, and those records reach the MySQL table a writer keeps.
Seen once in ~10 main-job runs on the embedded broker: a partition assigned at its beginning while
the ingest wrote it started at its end, and 3,223 rows never reached the MySQL mirror while the
pipeline reported no lag. Without the reader's sequence check, both tests lose the first JUMP
records of partition 1."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pymysql
import pytest
from confluent_kafka import TopicPartition

from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.pipeline.chain import Branch
from app.pipeline.engine import PipelineRuntime
from app.pipeline.kafka_log import KafkaCommitLog
from app.pipeline.memory import MemoryStateStore
from app.pipeline.readers import CompositeSource
from app.pipeline.writers import MysqlSink
from app.settings import Settings
from tests.integration.pipeline.support import composite_with
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration

MESSAGES = 60
JUMP = 7  # where the client starts partition 1


class JumpingClientSource(CompositeSource):
    """After the reader's first assignment, its client moves partition 1 to offset JUMP, as the
    client did on its own in the incident."""

    jumped = False

    def _assign_new(self, positions: Mapping[str, Any]) -> None:
        super()._assign_new(positions)
        if not self.jumped:
            self.jumped = True
            storage = sorted({name for name, _ in self._assigned})[0]
            self._consumer.incremental_unassign([TopicPartition(storage, 1)])
            self._consumer.incremental_assign([TopicPartition(storage, 1, JUMP)])


async def read_all(source: CompositeSource, want: int, timeout_s: float) -> list[tuple[str, int, str]]:
    """(partition, offset, id) of every entry the reader yields, until `want` distinct ids."""
    seen: list[tuple[str, int, str]] = []

    async def collect() -> None:
        async for batch in source.read({}):
            for entry in batch:
                ((where, after),) = entry.position.items()
                seen.append((where, int(after) - 1, str(entry.message.data["id"])))
            if len({i for _, _, i in seen}) >= want:
                return

    try:
        await asyncio.wait_for(collect(), timeout_s)
    except TimeoutError:
        pass  # the assertions say what is missing
    finally:
        await source.close()
    return seen


@pytest.mark.timeout(120)
def test_records_the_client_skipped_are_read_back(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    name = f"skipped-{unique}"
    composite_with(stack, metadata, name, 2, MESSAGES, groups=11)
    source = JumpingClientSource(stack, {"topic": name}, batch_size=10, wait_s=0.2)

    seen = asyncio.run(read_all(source, MESSAGES, timeout_s=60))

    assert source.jumped, "the client moved partition 1 past where the reader asked"
    ids = {i for _, _, i in seen}
    missing = sorted(set(f"m{i}" for i in range(MESSAGES)) - ids, key=lambda s: int(s[1:]))
    assert not missing, f"records the client skipped never reached the reader's output: {missing}"
    partition_1 = sorted(offset for where, offset, _ in seen if where.endswith("[1]"))
    assert partition_1[0] == 0, "partition 1 is read from its first record"
    assert partition_1 == list(range(partition_1[-1] + 1)), "and without a gap"


@pytest.fixture
def table(mysql: pymysql.connections.Connection[Any], unique: str) -> Iterator[str]:
    name = f"skipped_{unique}"
    with mysql.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id VARCHAR(16) PRIMARY KEY, i BIGINT)")
    yield name
    with mysql.cursor() as cur:
        cur.execute(f"DROP TABLE `{name}`")


def table_ids(mysql: pymysql.connections.Connection[Any], table: str) -> set[str]:
    with mysql.cursor() as cur:
        cur.execute(f"SELECT id FROM `{table}`")
        return {str(row[0]) for row in cur.fetchall()}


@pytest.mark.timeout(180)
def test_records_the_client_skipped_reach_the_mysql_table(
    stack: Settings,
    metadata: MetadataStore,
    mysql: pymysql.connections.Connection[Any],
    table: str,
    unique: str,
) -> None:
    """End to end, counted where the writer puts them: every source record is a row of the table."""
    name = f"skipped-mysql-{unique}"
    composite_with(stack, metadata, name, 2, MESSAGES, groups=11)
    source = JumpingClientSource(stack, {"topic": name}, batch_size=10, wait_s=0.2)
    log = KafkaCommitLog(broker_for(stack), f"skipped-log-{unique}")
    log.ensure_topic()
    sink = MysqlSink(stack, {"table": table, "columns": ["id", "i"]})
    expected = {f"m{i}" for i in range(MESSAGES)}

    async def scenario() -> None:
        runtime = PipelineRuntime(
            name=name,
            log_=log,
            store=MemoryStateStore(),
            source=source,
            writers={"mysql": (Branch("mysql"), sink)},
            writer_states={},
            reader_states={},
            batch_size=10,
            flush_interval_s=0.1,
        )
        await runtime.start()
        try:
            await async_wait_until(
                lambda: table_ids(mysql, table) >= expected,
                90,
                "every source record in the table",
                poll_s=0.1,
            )
        except AssertionError:
            pass  # the assertion below names what is missing
        finally:
            await runtime.stop(10)
            await sink.close()
            await log.close()

    asyncio.run(scenario())

    assert source.jumped, "the client moved partition 1 past where the reader asked"
    missing = sorted(expected - table_ids(mysql, table), key=lambda s: int(s[1:]))
    assert not missing, f"records the client skipped never reached the MySQL table: {missing}"
