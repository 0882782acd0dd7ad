"""A composite topic as the library's source: the settings, the pure `Source` (which storage
partitions a copy reads, where it holds), the engine's main positions `(storage_idx, offset)`
across a switch, and the copy's move to the next storage topic on the group's drained facts."""

from __future__ import annotations

import time

import pytest

from app.composite.advance import Drained, switch_grace
from app.composite.model import CompositeTopic
from app.consumer import following
from app.consumer.engine import LibraryEngine, Record
from app.consumer.kafka import KeyedConsumer
from app.consumer.model import ConsumerSettings, Message, RetryPolicy
from app.consumer.source import Source
from app.errors import InvalidInput
from app.ordered.engine import Outcome
from app.ordered.memory import MemoryQueues, MemoryStateLog
from app.ordered.records import decode_internal
from app.ordered.work import Work
from app.settings import Settings
from tests.support.waiting import async_wait_until


def composite_settings(**extra: object) -> ConsumerSettings:
    return ConsumerSettings(
        name="c",
        composite_topic="orders",
        bootstrap="unused:9",
        retry=RetryPolicy(max_attempts=3, min_backoff_s=0),
        **extra,  # type: ignore[arg-type]
    )


def test_settings_take_exactly_one_source() -> None:
    with pytest.raises(InvalidInput, match="give one source"):
        ConsumerSettings(name="c", topic="t", composite_topic="orders", bootstrap="b:9")
    with pytest.raises(InvalidInput, match=r"give topic .* or composite_topic"):
        ConsumerSettings(name="c", bootstrap="b:9")
    with pytest.raises(InvalidInput, match="composite topic name"):
        ConsumerSettings(name="c", composite_topic="no spaces", bootstrap="b:9")
    with pytest.raises(InvalidInput, match="bootstrap is empty"):
        ConsumerSettings(name="c", topic="t")
    with pytest.raises(InvalidInput, match="replication_factor"):
        ConsumerSettings(name="c", topic="t", bootstrap="b:9", replication_factor=0)
    plain = ConsumerSettings(name="c", topic="t", bootstrap="b:9")
    setting_default = Settings.model_fields["metadata_topic"].default
    assert (plain.metadata_topic, plain.replication_factor) == (setting_default, 1)
    assert (plain.source, plain.source_topic(0)) == ("t", "t")
    composite = composite_settings()
    assert (composite.source, composite.source_topic(0), composite.source_topic(2)) == (
        "orders",
        "orders.0",
        "orders.2",
    )
    assert composite.retry_topic == "c-retry"


def chain(*partitions: int, pointer: int = 0) -> CompositeTopic:
    topic = CompositeTopic.create("orders", partitions[0])
    for count in partitions[1:]:
        topic = topic.add_storage_topic(count)
    for _ in range(pointer):
        topic = topic.switch_produce()
    return topic


def test_a_copy_reads_the_storage_topics_that_keep_its_lanes_keys_together() -> None:
    same = Source.of_composite(chain(4, 4, 4, pointer=2))
    assert (same.lanes, same.readable_upto) == (4, 2)
    assert same.topics == ["orders.0", "orders.1", "orders.2"]
    drained: Drained = {0: dict.fromkeys(range(4), True), 1: dict.fromkeys(range(4), True)}
    assert same.read_index(0, drained) == 2
    assert not same.held(2)
    grown = Source.of_composite(chain(4, 4, 8, pointer=2))  # K = 2: lane L is orders.2[2L], [2L+1]
    assert (grown.readable_upto, grown.k_of(2)) == (2, 2)
    assert grown.read_index(0, drained) == 2
    assert grown.partitions_of(2, {1, 3}) == [2, 3, 6, 7]
    assert grown.partitions_of(1, {1, 3}) == [1, 3]
    custom_keys = Source.of_composite(chain(4, 4, 8, pointer=2), record_keys=False)
    assert custom_keys.readable_upto == 1, "another key function need not keep a key in one partition"
    assert custom_keys.held(1)
    # 4 -> 6: K = 1 on another base, keys of every lane in every partition
    rebased = Source.of_composite(chain(4, 6, pointer=1))
    assert rebased.composite.storage_topics[1].k == 1
    assert rebased.readable_upto == 0 and rebased.held(0)
    # 8 -> 4 (K=1, base 4) -> 8 (K=2): the same count as T_0 but routed otherwise
    back = Source.of_composite(chain(8, 4, 8, pointer=2))
    assert back.composite.storage_topics[2].k == 2
    assert back.readable_upto == 0
    plain = Source.of_topic("t", 4)
    assert (plain.lanes, plain.topics, plain.readable_upto, plain.index_of("t")) == (4, ["t"], 0, 0)


@pytest.mark.parametrize(("partitions", "k"), [(4, 1), (8, 2), (12, 3), (16, 4)])
def test_the_router_keeps_every_key_in_its_lanes_partitions(partitions: int, k: int) -> None:
    """Every key a producer routes into a storage topic of K·B partitions lands in one of the K
    partitions `partitions_of` gives its T_0 lane, and nowhere else."""
    topic = chain(4, partitions, pointer=1)
    source = Source.of_composite(topic)
    assert source.k_of(1) == k and source.routed_on_lanes(1)
    for n in range(2_000):
        key = f"customer-{n}"
        lane = source.partition_of_key(0, key)
        at = source.partition_of_key(1, key)
        assert at in source.partitions_of(1, {lane})
        assert all(at not in source.partitions_of(1, {other}) for other in range(4) if other != lane)


async def test_order_per_key_holds_across_the_switch() -> None:
    """Key a fails in orders.0, so its record in orders.1 (offset 0 again) waits behind the retry:
    positions compare as (storage_idx, offset)."""
    seen: list[tuple[str, str, int]] = []
    failed_once: set[str] = set()

    async def handle(message: Message) -> None:
        value = (message.value or b"").decode()
        if value == "a0" and value not in failed_once:
            failed_once.add(value)
            raise RuntimeError("later")
        seen.append((value, message.topic, message.offset))

    states, queues = MemoryStateLog(), MemoryQueues()
    engine = LibraryEngine(composite_settings(), handle, states, queues)
    t0 = [Work(Record("orders.0", 1, 7, b"a", b"a0"), 1, "a", storage_idx=0)]
    t1 = [
        Work(Record("orders.1", 1, 0, b"a", b"a1"), 1, "a", storage_idx=1),
        Work(Record("orders.1", 1, 1, b"b", b"b1"), 1, "b", storage_idx=1),
    ]
    assert [await engine.run(w) for w in t0 + t1] == [Outcome.RETRYING, Outcome.SIDELINED, Outcome.DELIVERED]
    for offset, (written, headers) in enumerate(queues.retry[1]):
        copy = Work(
            Record("c-retry", 1, offset, written.record.key, written.record.value, tuple(headers.items())),
            1,
            "a",
            decode_internal(tuple(headers.items())),
        )
        assert await engine.run(copy) is Outcome.DELIVERED
    assert seen == [("b1", "orders.1", 1), ("a0", "orders.0", 7), ("a1", "orders.1", 0)]
    state = states.get(1, "a")
    assert state is not None and state.handled == (1, 0)
    # A replay of the orders.0 record after a crash is below the key's handled position: skipped.
    assert await engine.run(t0[0]) is Outcome.SKIPPED
    assert engine.message(t1[0]).message_id == "orders.1-1-0"


class _Store:
    def __init__(self, topic: CompositeTopic) -> None:
        self.topic = topic

    def get(self, name: str) -> CompositeTopic:
        assert name == self.topic.name
        return self.topic


async def test_a_copy_moves_on_when_the_group_drained_the_storage_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []
    drained = {0: False}

    def facts(settings: ConsumerSettings, source: Source, idx: int) -> Drained:
        asked.append(idx)
        return {idx: {p: drained.get(idx, False) for p in range(4)}}

    monkeypatch.setattr(following, "drained_facts", facts)

    async def handle(message: Message) -> None:
        return None

    copy = KeyedConsumer(composite_settings(switch_grace_s=0.0), handle)
    store = _Store(chain(4))
    follow = copy._follow_source
    await follow(store)  # type: ignore[arg-type]
    assert (copy.read_idx, asked) == (0, []), "the produce pointer has not moved: nothing to ask"
    store.topic = chain(4, 4)
    await follow(store)  # type: ignore[arg-type]
    store.topic = chain(4, 4, pointer=1)
    await follow(store)  # type: ignore[arg-type]
    assert (copy.read_idx, asked) == (0, [0]), "orders.0 not drained by the group yet"
    drained[0] = True
    await follow(store)  # type: ignore[arg-type]
    assert copy.read_idx == 1
    store.topic = chain(4, 4, 8, pointer=2)
    drained[1] = True
    await follow(store)  # type: ignore[arg-type]
    assert copy.read_idx == 2, "orders.2 (K = 2) keeps each lane's keys in two of its partitions"
    store.topic = chain(4, 4, 8, 6, pointer=3)
    drained[2] = True
    await follow(store)  # type: ignore[arg-type]
    assert copy.read_idx == 2, "orders.3 spreads each lane's keys over all its partitions: the copy holds"


async def test_the_grace_period_runs_from_when_the_switch_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(following, "drained_facts", lambda s, src, idx: {idx: dict.fromkeys(range(4), True)})

    async def handle(message: Message) -> None:
        return None

    copy = KeyedConsumer(composite_settings(switch_grace_s=0.3), handle)
    store = _Store(chain(4, 4, pointer=1))
    await copy._follow_source(store)  # type: ignore[arg-type]
    assert copy.read_idx == 0, "producers may still hold the old pointer"
    seen_at = copy._switch_seen_at
    assert seen_at is not None

    async def moved_on() -> bool:
        await copy._follow_source(store)  # type: ignore[arg-type]
        return copy.read_idx == 1

    await async_wait_until(moved_on, 10, "the copy to move on once the grace period passed", poll_s=0.05)
    assert copy._switch_seen_at is None


@pytest.mark.parametrize(("clock_skew_s", "starts_at"), [(30.0, 0), (0.0, 1)])
async def test_a_start_allows_for_a_switcher_clock_behind_its_own(
    monkeypatch: pytest.MonkeyPatch, clock_skew_s: float, starts_at: int
) -> None:
    """The switch was 20 s ago on the switching host's clock, which runs 20 s behind this one:
    a start that took the recorded time at its word would leave orders.0 at once, while producers
    holding the old pointer may still write it. Allowed 30 s of clock skew, it stays and waits the
    grace on its own clock (`_follow_source`)."""
    monkeypatch.setattr(following, "drained_facts", lambda s, src, idx: {idx: dict.fromkeys(range(4), True)})

    async def handle(message: Message) -> None:
        return None

    switched = chain(4, 4).switch_produce(now_ms=int(time.time() * 1000) - 20_000)
    copy = KeyedConsumer(composite_settings(switch_grace_s=5.0, clock_skew_s=clock_skew_s), handle)
    await copy._start_composite(_Store(switched))  # type: ignore[arg-type]
    assert copy.read_idx == starts_at
    assert copy._topics == ["c-retry"], "the group assigns lanes; storage partitions follow them"


@pytest.mark.parametrize("field", ["switch_grace_s", "clock_skew_s"])
@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_grace_or_skew_that_is_negative_or_not_a_number_is_refused(field: str, value: float) -> None:
    """NaN compared as no switch ever recent: a start left the drained topic at once."""
    with pytest.raises(InvalidInput, match="must be numbers, not negative"):
        composite_settings(**{field: value})


async def test_by_default_a_copy_waits_the_grace_a_shard_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grace follows the producers' definition refresh, as a shard's does. Before, a copy waited
    a fixed 5 s: with producers refreshing every 10 s it left a storage topic they still wrote."""
    monkeypatch.setattr(following, "drained_facts", lambda s, src, idx: {idx: dict.fromkeys(range(4), True)})

    async def handle(message: Message) -> None:
        return None

    settings = composite_settings(metadata_refresh_s=10.0)
    assert settings.grace_s == switch_grace(10.0) == 21.0
    copy = KeyedConsumer(settings, handle)
    store = _Store(chain(4, 4, pointer=1))
    await copy._follow_source(store)  # type: ignore[arg-type]
    assert copy._switch_seen_at is not None
    # the switch seen 6 s ago (past the old fixed grace), well within two refreshes
    copy._switch_seen_at = time.monotonic() - 6.0
    await copy._follow_source(store)  # type: ignore[arg-type]
    assert copy.read_idx == 0, "producers refreshing every 10 s may still write orders.0"
    copy._switch_seen_at = time.monotonic() - 21.5
    await copy._follow_source(store)  # type: ignore[arg-type]
    assert copy.read_idx == 1


def test_a_refresh_interval_that_is_not_positive_is_refused() -> None:
    with pytest.raises(InvalidInput, match="metadata_refresh_s"):
        composite_settings(metadata_refresh_s=0.0)
