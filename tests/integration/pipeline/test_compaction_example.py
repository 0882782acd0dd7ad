"""The Transporter design's log-compaction example on the real commit log: the 28 messages of its two logs are
appended to a pipeline's commit log on the broker and read back, and the seed's rule (below the
earliest writer offset, in closed segments only, keep each key's latest message) leaves exactly
the seed's "after compaction" logs. On Kafka the commit log topic is compacted by the broker
(cleanup.policy=compact, 1 GB segments, a 7-day lag guard: see docs/pipeline.md); this test checks
the rule the pipeline's offsets and replay are designed against, on the records the log holds."""

from __future__ import annotations

import pytest

from app.kafka.broker import broker_for
from app.pipeline.kafka_log import KafkaCommitLog, read_log_range
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import compact
from app.settings import Settings

pytestmark = pytest.mark.integration

CLOSED = "AABBAABBCACBAACBA"  # ids 0-16: the seed's "commit log before compaction"
ACTIVE = "AABBAABBCAC"  # ids 17-27: the active log
WRITER_OFFSETS = {"c0A": 26, "c0B": 23, "c0C": 27}  # the seed's offset log after compaction


async def test_the_seeds_compaction_example_on_the_real_commit_log(kafka: Settings, unique: str) -> None:
    topic = f"hubstream.pipeline.compaction-{unique}.log"
    log = KafkaCommitLog(broker_for(kafka), topic)
    log.ensure_topic()
    try:
        keys = CLOSED + ACTIVE
        entries = [NewEntry(Message(Op.INSERT, 0, key, {"id": i}), Mode.SYNC) for i, key in enumerate(keys)]
        confirmed = await log.start_append(entries)
        assert await confirmed == list(range(len(keys)))
    finally:
        await log.close()

    stored = read_log_range(broker_for(kafka), topic, 0, len(keys) - 1)
    assert [(e.offset, e.key) for e in stored] == list(enumerate(keys))
    # Compaction may reach up to the earliest writer offset, and only into closed segments.
    floor = min(min(WRITER_OFFSETS.values()), len(CLOSED))
    kept = compact(stored, floor)
    assert [(e.offset, e.key) for e in kept[:3]] == [(14, "C"), (15, "B"), (16, "A")]  # old log after
    assert [e.offset for e in kept[3:]] == list(range(len(CLOSED), len(keys)))  # active log untouched
