"""Asking the copy that owns a key (app/consumer/owner.py): the key's lane, the request and reply
codec, the owner's answer built from its lanes, handler calls, retry copies and states (a copy
driven without a broker), and the requester's merge and changelog fallback over a fake transport."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Message as KafkaMessage

from app.composite.model import CompositeTopic, StorageTopic
from app.composite.routing import partition_for
from app.consumer import ConsumerSettings, KeyedConsumer, Message, RetryPolicy, key_from_header, record_key
from app.consumer.engine import LibraryEngine
from app.consumer.inspect import KafkaAsking
from app.consumer.owner import (
    CRC32,
    Answer,
    InFlight,
    LaneSet,
    Request,
    ask,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    key_route,
    lane_of,
)
from app.consumer.source import Source
from app.crashpoints import armed
from app.kafka.broker import broker_of
from app.kafka.producing import Delivered
from app.ordered.memory import MemoryQueues, MemoryStateLog
from app.ordered.rules import GroupState
from tests.support.leases import held_leases
from tests.support.waiting import async_wait_until

STATE = GroupState(retry_head=(0, 7)).to_json()


# -- routing ---------------------------------------------------------------------------------------
def test_a_plain_topic_keyed_by_the_ordering_key_routes_by_crc32() -> None:
    route = key_route(True, Source.of_topic("orders", 4))
    assert route == CRC32
    assert lane_of("customer-42", route, 4) == zlib.crc32(b"customer-42") % 4
    assert lane_of("", route, 4) is None  # librdkafka spreads empty keys at random


def test_a_composite_topic_routes_by_its_first_storage_topics_router() -> None:
    topic = CompositeTopic("c", (StorageTopic("c-0", 8, k=2), StorageTopic("c-1", 8, k=2)))
    route = key_route(True, Source.of_composite(topic))
    assert lane_of("group-9", route, 8) == partition_for("group-9", 8, 2)


def test_an_ordering_key_not_the_record_key_has_no_lane() -> None:
    assert key_route(key_from_header("tenant") is record_key, Source.of_topic("orders", 4)) == ""
    assert lane_of("t1", "", 4) is None


# -- codec -----------------------------------------------------------------------------------------
def test_requests_and_replies_round_trip() -> None:
    request = Request.new("k", 1_000)
    assert decode_request(encode_request(request)) == request
    answer = Answer(3, "owner", STATE, "memory", "copy-1", InFlight("t", 5, 2, "t-3-5"), True, 4, 1, 99)
    assert decode_reply(encode_reply(request.id, answer)) == (request.id, answer)
    idle = Answer(0, "owner", None, "memory", "copy-1")
    assert decode_reply(encode_reply("x", idle)) == ("x", idle)


@pytest.mark.parametrize("value", [None, b"", b"not json", b"[1]", b'{"id": "x"}', b'{"id":"x","answer":{}}'])
def test_anything_else_on_the_topics_is_ignored(value: bytes | None) -> None:
    assert decode_request(value) is None
    assert decode_reply(value) is None


def test_old_requests_are_not_answered() -> None:
    request = Request("r", "k", 1_000_000)
    assert not request.stale(1_000_000 + 9_000)
    assert request.stale(1_000_000 + 11_000)


def test_lanes_handed_over_between_threads() -> None:
    lanes = LaneSet()
    lanes.add([0, 1])
    lanes.add([3])
    lanes.remove([1])
    assert lanes.now() == frozenset({0, 3})


# -- the owner's answer, from a copy driven without a broker -----------------------------------------
@dataclass
class Replies:
    sent: list[tuple[str, int, bytes | None, bytes | None]] = field(default_factory=list)

    async def send(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any = None
    ) -> Delivered:
        self.sent.append((topic, partition, key, value))
        return Delivered(topic, partition, len(self.sent) - 1)

    def last(self) -> Answer:
        found = decode_reply(self.sent[-1][3])
        assert found is not None
        return found[1]


def main_record(partition: int, offset: int, key: str) -> KafkaMessage:
    return KafkaMessage(topic="orders", partition=partition, offset=offset, key=key.encode(), value=b"v")


async def test_the_owner_answers_from_its_lanes_handler_calls_retry_copies_and_states(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = asyncio.Event()

    async def handle(message: Message) -> None:
        if message.ordering_key == "stuck":
            await release.wait()
        elif message.ordering_key == "flaky":
            raise RuntimeError("not now")

    config = ConsumerSettings(
        name="own",
        topic="orders",
        bootstrap="-",
        concurrency=4,
        retry=RetryPolicy(max_attempts=5, min_backoff_s=60, max_backoff_s=60),
    )
    consumer = KeyedConsumer(config, handle, member_id="copy-a")
    states, queues, replies = MemoryStateLog(), MemoryQueues(), Replies()
    consumer._loop = asyncio.get_running_loop()
    consumer.partitions = 2
    consumer._shares = None
    consumer._states = states  # type: ignore[assignment]
    consumer._producer = replies  # type: ignore[assignment]
    consumer._engine = LibraryEngine(config, consumer._handler, states, queues)
    consumer._owned.update({0, 1})
    consumer._leases.update(held_leases({0, 1}))
    for _ in range(config.concurrency):
        consumer._spawn_worker()
    retry_loop = asyncio.create_task(consumer._retry_loop())
    try:
        # stuck: three records in partition 0 (one running, two waiting); flaky: two in
        # partition 1 (the first fails, the second is sidelined behind it).
        consumer._admit_batch([main_record(0, o, "stuck") for o in range(3)])
        consumer._admit_batch([main_record(1, 0, "flaky"), main_record(1, 1, "flaky")])
        await async_wait_until(lambda: len(queues.retry.get(1, [])) == 2, 5, "flaky's two retry copies")
        copies = [
            KafkaMessage(
                topic=config.retry_topic,
                partition=1,
                offset=o,
                key=b"flaky",
                value=b"v",
                headers=list(h.items()),
            )
            for o, (_, h) in enumerate(queues.retry[1])
        ]
        consumer._admit_batch(copies)  # read back: they wait for the first one's due time
        await async_wait_until(lambda: not consumer._pull_open, 5, "the copies taken in")
        await async_wait_until(lambda: consumer._running((0, "stuck")), 5, "stuck running")

        await consumer._answer(Request("r1", "stuck", 0), 0)
        stuck = replies.last()
        assert replies.sent[-1][:3] == (config.replies_topic, 0, b"r1")
        assert (stuck.source, stuck.member, stuck.partition, stuck.state_from) == (
            "owner",
            "copy-a",
            0,
            "memory",
        )
        assert stuck.in_flight == InFlight("orders", 0, 1, "orders-0-0")
        assert (stuck.lane_busy, stuck.waiting, stuck.state, stuck.retry_waiting) == (True, 2, None, 0)

        await consumer._answer(Request("r2", "flaky", 0), 1)
        flaky = replies.last()
        assert flaky.state == states.get(1, "flaky").to_json()  # type: ignore[union-attr]
        assert flaky.state is not None and flaky.state["retry_head"] == [0, 0]
        assert (flaky.in_flight, flaky.lane_busy, flaky.waiting, flaky.retry_waiting) == (None, False, 0, 2)
        head = consumer._retry_wait[1][0][0].meta  # the failed copy; the sidelined one waits behind it
        assert head is not None and head.failure is not None
        assert flaky.next_retry_due_ms == head.due_ms >= head.failure.failed_ms + 60_000

        # A partition taken and still loading: its state as the changelog has it.
        monkeypatch.setattr(
            "app.consumer.key_questions.changelog_states", lambda *_: {1: {"s": STATE, "at_ms": 5}}
        )
        consumer._owned.discard(1)
        await consumer._answer(Request("r3", "flaky", 0), 1)
        loading = replies.last()
        assert (loading.state, loading.state_from, loading.loading) == (STATE, "changelog", True)

        with armed("consumer.state.reply"):  # a reply not written: the copy goes on
            await consumer._answer(Request("r4", "stuck", 0), 0)
        assert len(replies.sent) == 3
        release.set()
        await async_wait_until(lambda: consumer._lanes.waiting((0, "stuck")) is None, 5, "stuck done")
        await consumer._answer(Request("r5", "stuck", 0), 0)
        assert replies.last().lane_busy is False and replies.last().in_flight is None
    finally:
        release.set()
        retry_loop.cancel()
        for task in list(consumer._workers):
            task.cancel()
        await asyncio.gather(retry_loop, *consumer._workers, return_exceptions=True)


# -- the requester: merge and fallback -------------------------------------------------------------
@dataclass
class FakeTransport:
    live: list[str] = field(default_factory=lambda: [CRC32])
    partitions: int = 4
    owners: dict[int, str] = field(default_factory=lambda: {p: f"copy-{p % 2}" for p in range(4)})
    logged: dict[int, dict[str, Any]] = field(default_factory=dict)
    sent: list[tuple[list[int], Request]] = field(default_factory=list)
    extra: list[tuple[str, Answer]] = field(default_factory=list)  # replies to others, first
    changelog_reads: int = 0

    def routes(self) -> list[str]:
        return self.live

    def lanes(self) -> int:
        return self.partitions

    def reply_mark(self) -> int:
        return 0

    def send(self, partitions: list[int], request: Request) -> None:
        self.sent.append((partitions, request))

    def replies(self, since: int, timeout_s: float) -> Iterator[tuple[str, Answer]]:
        yield from self.extra
        for partitions, request in self.sent:
            for p in partitions:
                if p in self.owners:
                    state = STATE if p == 2 else None
                    yield request.id, Answer(p, "owner", state, "memory", self.owners[p])
                    yield request.id, Answer(p, "owner", None, "memory", "a-duplicate")

    def changelog(self, key: str) -> dict[int, dict[str, Any]]:
        self.changelog_reads += 1
        return self.logged


def test_the_keys_lane_owner_answers() -> None:
    t = FakeTransport(extra=[("someone-else", Answer(0, "owner", STATE, "memory", "x"))])
    lane = zlib.crc32(b"k1") % 4
    got = ask(t, "k1", 1.0)
    assert [s[0] for s in t.sent] == [[lane]]
    assert got.source == "owner" and got.asked == (lane,) and list(got.partitions) == [lane]
    assert got.partitions[lane].member == t.owners[lane]  # the first answer, not the duplicate
    assert t.changelog_reads == 0


def test_no_answer_in_time_falls_back_to_the_changelog_and_says_so() -> None:
    lane = zlib.crc32(b"k1") % 4
    t = FakeTransport(owners={}, logged={lane: {"s": STATE, "at_ms": 12}, (lane + 1) % 4: {"s": STATE}})
    got = ask(t, "k1", 0.5)
    assert got.source == "changelog" and "within 0.5 s" in got.note
    assert list(got.partitions) == [lane]  # only the lane asked
    assert got.partitions[lane] == Answer(lane, "changelog", STATE, at_ms=12)


def test_without_a_lane_every_partition_is_asked_and_the_answers_merged() -> None:
    t = FakeTransport(live=[""], owners={0: "copy-0", 2: "copy-1"}, logged={3: {"s": STATE, "at_ms": 1}})
    got = ask(t, "k1", 0.5)
    assert t.sent[0][0] == [0, 1, 2, 3]
    assert got.source == "mixed"
    # owners' answers with something to say (2), and the changelog's for lanes not answered (3)
    assert {p: a.source for p, a in got.partitions.items()} == {2: "owner", 3: "changelog"}
    assert "[1, 3]" in got.note


def test_copies_disagreeing_on_the_route_or_everywhere_ask_every_partition() -> None:
    t = FakeTransport(live=[CRC32, ""])
    assert ask(t, "k1", 0.5).source == "owner"
    assert t.sent[0][0] == [0, 1, 2, 3]
    t = FakeTransport()
    ask(t, "k1", 0.5, everywhere=True)
    assert t.sent[0][0] == [0, 1, 2, 3]


def test_no_live_copy_answers_from_the_changelog_without_asking() -> None:
    t = FakeTransport(live=[], logged={1: {"s": STATE, "at_ms": 3}})
    got = ask(t, "k1", 5.0)
    assert (got.source, list(got.partitions), t.sent) == ("changelog", [1], [])
    assert "no live copy" in got.note
    assert ask(FakeTransport(partitions=0), "k1", 5.0).note.startswith("no requests topic")


class OfflineAsking(KafkaAsking):
    """The real request writer, the rest faked: nothing answers."""

    def routes(self) -> list[str]:
        return [CRC32]

    def lanes(self) -> int:
        return 4

    def reply_mark(self) -> int:
        return 0

    def replies(self, since: int, timeout_s: float) -> Iterator[tuple[str, Answer]]:
        return iter(())

    def changelog(self, key: str) -> dict[int, dict[str, Any]]:
        return {zlib.crc32(key.encode()) % 4: {"s": STATE, "at_ms": 1}}


def test_a_request_not_written_is_answered_from_the_changelog() -> None:
    with armed("consumer.state.request") as trigger:
        got = ask(OfflineAsking(broker_of("embedded", "127.0.0.1:1"), "own"), "k1", 5.0)
    assert trigger.fired
    assert got.source == "changelog" and "not written" in got.note and got.partitions
