"""A copy of a library consumer simulated on one partition, through the real LibraryEngine, OffsetTracker
and KeyLanes, with crashes at the writes the adapter names as crash points.

The world keeps what survives a crash: the main log, the retry and DLQ topics, the key states
(`MemoryStateLog`) and the committed offsets with their metadata (the finished offsets above them,
skipped by the next incarnation). An incarnation reads both topics from the committed offsets and
runs keys in an order a seeded random scheduler picks; it commits after every
finished record (the earliest the adapter could). A crash at write N raises out of it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from app.consumer.engine import KEY_HEADER, LibraryEngine, Record
from app.consumer.model import ConsumerSettings, Message, OnDlq, PermanentError, RetryPolicy
from app.consumer.orphans import DlqMark, adopt_copies, copy_at
from app.ordered.memory import MemoryQueues, MemoryStateLog
from app.ordered.progress import KeyLanes, OffsetTracker, decode_finished
from app.ordered.records import decode_internal
from app.ordered.rules import GroupState, Position, forgettable
from app.ordered.work import Work

OK, RETRY, FATAL = "ok", "retry", "fatal"
TOPIC = "orders"


class Crash(Exception):
    """The process died at a crash point."""


@dataclass
class World:
    main: list[tuple[str, int]]  # (key, value) in offset order
    # (value, nth call of the handler for it, over all incarnations) -> OK | RETRY | FATAL (default
    # OK): a downstream that failed once may take the message when a replay calls it again
    answers: dict[tuple[int, int], str]
    calls: dict[int, int] = field(default_factory=dict)
    crash_at: set[int] = field(default_factory=set)  # crash-point hits that kill the copy
    hits: int = 0
    states: MemoryStateLog = field(default_factory=MemoryStateLog)
    queues: MemoryQueues = field(default_factory=MemoryQueues)
    committed_main: int = 0
    committed_retry: int = 0
    # the commits' metadata: finished offsets above the committed ones ("" where the broker drops it)
    progress: dict[str, str] = field(default_factory=dict)
    keep_metadata: bool = True
    dlq_from: int = 0  # the DLQ mark written with the last commit: adoption reads the DLQ from it
    mark: DlqMark = field(default_factory=lambda: DlqMark(0))  # the live incarnation's
    handled: list[tuple[str, int]] = field(default_factory=list)  # successful handler calls
    crashes: int = 0
    # After each commit, drop the states of idle keys by this rule (the adapter's: `forgettable`
    # with the committed offsets); None: keep every state
    forget: Callable[[GroupState, int, int], bool] | None = None
    forgotten: int = 0

    def point(self) -> None:
        self.hits += 1
        if self.hits in self.crash_at:
            raise Crash(f"crash at hit {self.hits}")

    @property
    def retry_log(self) -> list[tuple[Work, dict[str, bytes]]]:
        return self.queues.retry.setdefault(0, [])

    @property
    def dlq_log(self) -> list[tuple[Work, dict[str, bytes]]]:
        return self.queues.dlq.setdefault(0, [])


class _States(MemoryStateLog):
    def __init__(self, world: World) -> None:
        self.world = world

    def get(self, partition: int, key: str):  # type: ignore[no-untyped-def]
        return self.world.states.get(partition, key)

    async def put(self, partition: int, key: str, state) -> None:  # type: ignore[no-untyped-def]
        self.world.point()  # consumer.state.write: before the write
        await self.world.states.put(partition, key, state)
        if state.dlq.p is not None:
            self.world.mark.recorded(state.dlq.p.internal_topic_offset)


class _Queues(MemoryQueues):
    def __init__(self, world: World) -> None:
        self.world = world

    async def to_retry(self, work, headers) -> Position:  # type: ignore[no-untyped-def]
        at = await self.world.queues.to_retry(work, headers)
        self.world.point()  # consumer.retry.confirmed
        return at

    async def to_dlq(self, work, headers) -> Position:  # type: ignore[no-untyped-def]
        self.world.mark.sending()
        at = await self.world.queues.to_dlq(work, headers)
        self.world.mark.confirmed(at[1], needs_state=not work.undecodable)
        self.world.point()  # consumer.dlq.confirmed
        return at


def settings(on_dlq: OnDlq) -> ConsumerSettings:
    return ConsumerSettings(
        name="sim",
        topic=TOPIC,
        bootstrap="-",
        retry=RetryPolicy(max_attempts=3, min_backoff_s=0),
        on_dlq=on_dlq,
    )


async def _incarnation(world: World, on_dlq: OnDlq, rng: random.Random, adopt: bool) -> None:
    async def handle(message: Message) -> None:
        value = int(message.value or b"0")
        world.calls[value] = world.calls.get(value, 0) + 1
        answer = world.answers.get((value, world.calls[value]), OK)
        if answer == RETRY:
            raise RuntimeError(f"transient {value}")
        if answer == FATAL:
            raise PermanentError(f"fatal {value}")
        world.handled.append((message.ordering_key, value))

    states = _States(world)
    engine = LibraryEngine(settings(on_dlq), handle, states, _Queues(world), clock=lambda: 0.0)
    if adopt:  # as the adapter does when it takes the partition: retry from its commit, DLQ from its mark
        retry = [copy_at("rq", o, list(h.items())) for o, (_, h) in enumerate(world.retry_log)][
            world.committed_retry :
        ]
        dlq = [copy_at("dlq", o, list(h.items())) for o, (_, h) in enumerate(world.dlq_log)][world.dlq_from :]
        await adopt_copies(states, 0, [c for c in retry + dlq if c is not None])
    world.mark = DlqMark(len(world.dlq_log))
    committed = {"main": world.committed_main, "retry": world.committed_retry}
    trackers = {
        source: OffsetTracker(offset, decode_finished(offset, world.progress.get(source)))
        for source, offset in committed.items()
    }
    next_read = {"main": world.committed_main, "retry": world.committed_retry}
    lanes: KeyLanes[str, tuple[str, Work]] = KeyLanes()
    ready: list[tuple[str, Work]] = []
    while True:
        moves: list[str] = []
        if next_read["main"] < len(world.main):
            moves.append("main")
        if next_read["retry"] < len(world.retry_log):
            moves.append("retry")
        if ready:
            moves.append("run")
        if not moves:
            return
        move = rng.choice(moves)
        if move in ("main", "retry"):
            offset = next_read[move]
            next_read[move] += 1
            if not trackers[move].read(offset):
                continue  # finished before the crash, as the commit's metadata records
            work = _work(world, move, offset)
            if lanes.add(work.ordering_key, (move, work)):
                ready.append((move, work))
            continue
        source, work = ready.pop(rng.randrange(len(ready)))
        await engine.run(work)
        trackers[source].finish(work.record.offset)
        nxt = lanes.done(work.ordering_key)
        if nxt is not None:
            ready.append(nxt)
        world.point()  # consumer.offsets.commit
        world.committed_main = trackers["main"].committable
        world.committed_retry = trackers["retry"].committable
        if world.keep_metadata:
            world.progress = {source: tracker.progress() for source, tracker in trackers.items()}
        if adopt and world.mark.mark is not None:
            world.dlq_from = max(world.dlq_from, world.mark.mark)
        if world.forget is not None:
            _forget(world, lanes)


def committed_rule(state: GroupState, committed_main: int, committed_retry: int) -> bool:
    """The adapter's rule, with the committed offsets of the simulated partition."""
    return forgettable(state, (0, committed_main), (0, committed_retry))


def _forget(world: World, lanes: KeyLanes[str, tuple[str, Work]]) -> None:
    busy = lanes.busy_keys
    states = world.states.states
    for (partition, key), state in list(states.items()):
        if key in busy or world.forget is None:
            continue
        if world.forget(state, world.committed_main, world.committed_retry):
            world.point()  # consumer.state.forget: before the tombstone
            del states[(partition, key)]
            world.forgotten += 1


def _work(world: World, source: str, offset: int) -> Work:
    if source == "main":
        key, value = world.main[offset]
        return Work(Record(TOPIC, 0, offset, key.encode(), str(value).encode()), 0, key)
    copy, headers = world.retry_log[offset]
    record = Record(f"{TOPIC}-retry", 0, offset, copy.record.key, copy.record.value, tuple(headers.items()))
    return Work(record, 0, headers[KEY_HEADER].decode(), decode_internal(record.headers))


def run(world: World, on_dlq: OnDlq, seed: int, max_crashes: int = 5, adopt: bool = True) -> World:
    """Incarnations until one finishes; each crash restarts from what survived."""
    rng = random.Random(seed)
    while True:
        try:
            asyncio.run(_incarnation(world, on_dlq, rng, adopt))
            return world
        except Crash:
            world.crashes += 1
            if world.crashes > max_crashes:
                raise
