"""A record of a key without state takes the copy's short path (`LibraryEngine.fresh`: the filter and
handler called directly, no rule check, no state write); the same records through the general path
only (`LibraryEngine.run` for every record) give the same outcome: each key's handler calls in the same
order, the same retry and DLQ copies per key, the same counts, every offset of the source and retry
partitions committed. Keys acquire state mid-stream (a failure): their later records, queued behind
the failed one or read after it, take the general path.

The copy runs without a broker: batches of in-memory `confluent_kafka.Message`s go to
`_admit_batch` as the poll thread hands them over, the retry copies the engine wrote are handed
back the same way (as the copy reads `<name>-retry`), until nothing is left."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Message as KafkaMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from app.consumer import (
    ConsumerSettings,
    KeyedConsumer,
    KeyOf,
    Message,
    OnDlq,
    PermanentError,
    RetryPolicy,
    record_key,
)
from app.consumer.engine import LibraryEngine
from app.ordered.engine import Outcome
from app.ordered.memory import MemoryQueues, MemoryStateLog
from app.ordered.work import Work
from tests.support.leases import held_leases

TOPIC = "orders"
OK, RETRY, FATAL = "ok", "retry", "fatal"


class GeneralOnly(LibraryEngine):
    """Every record through `run`: the rule check and state write of the general path."""

    def fresh(self, work: Work) -> Message | None:
        return None


class Counting(LibraryEngine):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.ran: list[str] = []

    async def run(self, work: Work) -> Outcome:
        self.ran.append(work.ordering_key)
        return await super().run(work)


@dataclass
class Outcome_:
    calls: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # key -> (value, attempt)
    handled: dict[str, list[int]] = field(default_factory=dict)  # key -> values handled successfully
    retry: dict[str, list[int]] = field(default_factory=dict)  # key -> values copied to the retry topic
    dlq: dict[str, list[int]] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    commits: dict[tuple[str, int], int] = field(default_factory=dict)
    general_runs: list[str] = field(default_factory=list)


def fetched(records: list[tuple[str, int]], partitions: int) -> list[KafkaMessage]:
    """(key, value) in produce order; a key's partition is its first letter's code modulo."""
    offsets = [0] * partitions
    out = []
    for key, value in records:
        p = ord(key[0]) % partitions
        out.append(
            KafkaMessage(topic=TOPIC, partition=p, offset=offsets[p], key=key.encode(), value=b"%d" % value)
        )
        offsets[p] += 1
    return out


async def settle(consumer: KeyedConsumer) -> None:
    while consumer._buffered or consumer._pull_open or any(consumer._retry_wait.values()):
        consumer._lane_ended.clear()
        await asyncio.wait_for(consumer._lane_ended.wait(), 10)


async def drive(
    engine_type: type[LibraryEngine],
    records: list[tuple[str, int]],
    answers: dict[tuple[int, int], str],
    on_dlq: OnDlq,
    *,
    partitions: int = 2,
    batch: int = 7,
    concurrency: int = 3,
    filtered: frozenset[int] = frozenset(),
    filter_raises: frozenset[int] = frozenset(),
    key_of: KeyOf = record_key,
    suspends: frozenset[int] | None = None,
) -> Outcome_:
    out = Outcome_()
    nth: dict[int, int] = {}

    async def handle(message: Message) -> None:
        value = int(message.value or b"0")
        nth[value] = nth.get(value, 0) + 1
        out.calls.setdefault(message.ordering_key, []).append((value, message.attempt))
        if suspends is None or value in suspends:
            await asyncio.sleep(0)  # other keys run meanwhile (else the call ends without suspending)
        answer = answers.get((value, nth[value]), OK)
        if answer == RETRY:
            raise RuntimeError(f"transient {value}")
        if answer == FATAL:
            raise PermanentError(f"fatal {value}")
        out.handled.setdefault(message.ordering_key, []).append(value)

    def keep(message: Message) -> bool:
        value = int(message.value or b"0")
        if value in filter_raises:
            raise ValueError(f"filter fails on {value}")
        return value not in filtered

    config = ConsumerSettings(
        name="fp",
        topic=TOPIC,
        bootstrap="-",
        concurrency=concurrency,
        retry=RetryPolicy(max_attempts=3, min_backoff_s=0),
        on_dlq=on_dlq,
        key_of=key_of,
        filter=keep if filtered or filter_raises else None,
    )
    consumer = KeyedConsumer(config, handle)
    queues = MemoryQueues()
    engine = engine_type(config, consumer._handler, MemoryStateLog(), queues)
    consumer._loop = asyncio.get_running_loop()
    consumer.partitions = partitions
    consumer._shares = None
    consumer._engine = engine
    consumer._owned.update(range(partitions))
    consumer._leases.update(held_leases(range(partitions)))
    for _ in range(concurrency):
        consumer._spawn_worker()
    retry_loop = asyncio.create_task(consumer._retry_loop())
    try:
        main = fetched(records, partitions)
        for start in range(0, len(main), batch):
            consumer._admit_batch(main[start : start + batch])
        read = dict.fromkeys(range(partitions), 0)
        while True:
            await settle(consumer)
            copies = [
                KafkaMessage(
                    topic=config.retry_topic,
                    partition=p,
                    offset=o,
                    key=work.record.key,
                    value=work.record.value,
                    headers=list(headers.items()),
                )
                for p in range(partitions)
                for o, (work, headers) in enumerate(queues.retry.get(p, []))
                if o >= read[p]
            ]
            if not copies:
                break
            for copy in copies:
                read[copy.partition()] = copy.offset() + 1
            consumer._admit_batch(copies)
        out.commits = {tp: c[0] for tp, c in (await consumer._to_commit()).items()}
        for tracker in consumer._trackers.values():
            assert tracker.open == 0 and tracker.committable == tracker.next_offset
    finally:
        retry_loop.cancel()
        for task in list(consumer._workers):
            task.cancel()
        await asyncio.gather(retry_loop, *consumer._workers, return_exceptions=True)
    for p in range(partitions):
        for work, _ in queues.retry.get(p, []):
            out.retry.setdefault(work.ordering_key, []).append(int(work.record.value or b"0"))
        for work, _ in queues.dlq.get(p, []):
            out.dlq.setdefault(work.ordering_key, []).append(int(work.record.value or b"0"))
    st_ = consumer.stats
    out.stats = {
        name: getattr(st_, name)
        for name in (
            "delivered",
            "filtered",
            "retrying",
            "sidelined",
            "dead_lettered",
            "skipped",
            "attempts",
            "failures",
            "write_failures",
        )
    }
    if isinstance(engine, Counting):
        out.general_runs = engine.ran
    return out


@pytest.mark.parametrize(
    "key_of",
    [record_key, lambda m: record_key(m)],
    ids=["record key (no Work until needed)", "a key function (a Work from the start)"],
)
@pytest.mark.parametrize("suspends", [None, frozenset()], ids=["every call suspends", "no call suspends"])
def test_a_key_that_fails_mid_stream_keeps_its_order_on_both_paths(
    key_of: KeyOf, suspends: frozenset[int] | None
) -> None:
    # a: a0 ok, a1 fails once, a2 and a3 wait behind it; b never fails; c dead-letters c1 (block_group)
    records = [("a", 0), ("b", 10), ("a", 1), ("c", 20), ("a", 2), ("b", 11), ("c", 21), ("a", 3), ("c", 22)]
    answers = {(1, 1): RETRY, (21, 1): FATAL}
    fast = asyncio.run(drive(Counting, records, answers, OnDlq.BLOCK_GROUP, key_of=key_of, suspends=suspends))
    general = asyncio.run(
        drive(GeneralOnly, records, answers, OnDlq.BLOCK_GROUP, key_of=key_of, suspends=suspends)
    )
    _diff(fast, general)
    assert fast.calls["a"] == [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1)]
    assert fast.handled == {"a": [0, 1, 2, 3], "b": [10, 11], "c": [20]}
    assert fast.retry == {"a": [1, 2, 3]}  # the failure, then its key's later records sidelined
    assert fast.dlq == {"c": [21, 22]}
    assert fast.commits == general.commits
    # The records of keys without state took the short path: b's never reached `run`, and only
    # the records read after their key failed (and the retry copies) did.
    assert "b" not in fast.general_runs
    assert sorted(fast.general_runs) == ["a", "a", "a", "a", "a", "c"]


def _diff(fast: Outcome_, general: Outcome_) -> bool:
    for name in ("calls", "handled", "retry", "dlq", "stats", "commits"):
        assert getattr(fast, name) == getattr(general, name), name
    return True


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[tuple[str, int]], dict[tuple[int, int], str]]:
    keys = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=40))
    records = [(key, value) for value, key in enumerate(keys)]
    answers = draw(
        st.dictionaries(
            st.tuples(st.integers(0, len(keys) - 1), st.integers(1, 3)), st.sampled_from([RETRY, FATAL])
        )
    )
    return records, answers


@settings(max_examples=60, deadline=None)
@given(
    streams(),
    st.sampled_from(list(OnDlq)),
    st.integers(1, 10),
    st.integers(1, 4),
    st.frozensets(st.integers(0, 39), max_size=4),
    st.frozensets(st.integers(0, 39), max_size=2),
    st.none() | st.frozensets(st.integers(0, 39)),
)
def test_the_short_path_gives_the_general_paths_outcome(
    stream: tuple[list[tuple[str, int]], dict[tuple[int, int], str]],
    on_dlq: OnDlq,
    batch: int,
    concurrency: int,
    filtered: frozenset[int],
    filter_raises: frozenset[int],
    suspends: frozenset[int] | None,
) -> None:
    """`suspends`: the records whose handler call suspends (None: all); the others' calls end
    without suspending, as a cheap handler's do, and run where the copy takes them in."""
    records, answers = stream
    kwargs = {
        "batch": batch,
        "concurrency": concurrency,
        "filtered": filtered,
        "filter_raises": filter_raises,
        "suspends": suspends,
    }
    fast = asyncio.run(drive(LibraryEngine, records, answers, on_dlq, **kwargs))  # type: ignore[arg-type]
    general = asyncio.run(drive(GeneralOnly, records, answers, on_dlq, **kwargs))  # type: ignore[arg-type]
    _diff(fast, general)
    ends: dict[tuple[str, int], int] = {}
    for m in fetched(records, 2):
        ends[(TOPIC, m.partition())] = m.offset() + 1
    assert {tp: o for tp, o in fast.commits.items() if tp[0] == TOPIC} == ends
