"""A writer's bulks between the commit log and its sink: what the branch passes, prepared by the sink,
then written, at most `depth` at a time and confirmed oldest first. A writer with
`errors_tolerance: all` dead-letters the messages its chain or its sink's conversion fails on, and
waits for the dead-letter queue to confirm them, while it prepares the bulk: the bulk (and so the
writer's offset past those messages) is confirmed only after that."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.crashpoints import crash_point
from app.pipeline.chain import Branch
from app.pipeline.errors import TransformFailed
from app.pipeline.model import LogEntry, Message, Op
from app.pipeline.ports import CheckedSink, DeadLetterQueue, PipelinedSink, Sink
from app.pipeline.tolerance import Failure, Stage, dead_letter

__all__ = [
    "Bulk",
    "DeadLetterer",
    "DeadLettering",
    "Sending",
    "outgoing",
    "prepare_bulk",
    "write_bulk",
]

log = logging.getLogger(__name__)

# Sends failed messages to the dead-letter queue; returns once it confirmed them.
DeadLetterer = Callable[[list[Failure]], Awaitable[None]]


@dataclass
class Bulk:
    """One batch of a writer: its log entries and the sink's prepared form of what the branch passed."""

    first: int  # log offsets of the batch
    last: int
    namespaces: dict[str, int]  # each namespace's last offset in the batch
    count: int = 0  # messages the branch passed
    prepared: Any = None
    error: Exception | None = None  # the branch or the sink's prepare failed: the bulk fails when sent


def outgoing(branch: Branch, batch: list[LogEntry]) -> list[Message]:
    """The messages the branch passes (commands are acknowledged without writing)."""
    if branch.passes_all:  # (the op compared here: `is_command` costs a call per entry)
        return [entry.value for entry in batch if entry.value.op is not Op.COMMAND]
    out = []
    for entry in batch:
        if not entry.is_command:
            message = branch.apply(entry.value)
            if message is not None:
                out.append(message)
    return out


@dataclass
class DeadLettering:
    """A tolerant writer's dead letters: sent to the queue, returning once it confirmed them."""

    pipeline: str
    writer: str
    queue: DeadLetterQueue
    count: int = 0

    async def __call__(self, failures: list[Failure]) -> None:
        now_ms = int(time.time() * 1000)
        await self.queue.send([dead_letter(self.pipeline, self.writer, f, now_ms) for f in failures])
        crash_point("pipeline.dlq.confirmed")  # dead letters confirmed; the offset not past them yet
        self.count += len(failures)
        for f in failures:
            log.warning(
                "pipeline %s: writer %s: log offset=%d dead-lettered (%s%s): %s: %s",
                self.pipeline,
                self.writer,
                f.entry.offset,
                f.stage.value,
                f" {f.step}" if f.step else "",
                type(f.error).__name__,
                f.error,
            )


async def prepare_bulk(
    branch: Branch, sink: Sink, batch: list[LogEntry], dead_letter: DeadLetterer | None = None
) -> Bulk:
    """The batch's bulk; with `dead_letter` (errors_tolerance all) failed messages are dead-lettered."""
    bulk = Bulk(batch[0].offset, batch[-1].offset, {entry.key: entry.offset for entry in batch})
    try:
        if dead_letter is not None:
            bulk.count, bulk.prepared = await _tolerant(branch, sink, batch, dead_letter)
            return bulk
        messages = outgoing(branch, batch)
        bulk.count = len(messages)
        if messages:
            bulk.prepared = await sink.prepare(messages) if isinstance(sink, PipelinedSink) else messages
    except Exception as exc:
        bulk.error = exc
    return bulk


async def _convert(sink: Sink, messages: list[Message]) -> Any:
    """The messages in the sink's form; raises on one the sink cannot convert."""
    if isinstance(sink, PipelinedSink):
        return await sink.prepare(messages)
    if isinstance(sink, CheckedSink):
        sink.check(messages)
    return messages


async def _tolerant(
    branch: Branch, sink: Sink, batch: list[LogEntry], dead_letter: DeadLetterer
) -> tuple[int, Any]:
    """How many messages the branch passes and the sink converts, and their prepared form; the others
    are dead-lettered (and confirmed) first."""
    failures: list[Failure] = []
    passed: list[tuple[LogEntry, Message]] = []
    for entry in batch:
        if entry.is_command:
            continue
        try:
            message = branch.apply_naming_step(entry.value)
        except TransformFailed as exc:
            failures.append(Failure(entry, Stage.TRANSFORM, exc.step, exc.error))
            continue
        if message is not None:
            passed.append((entry, message))
    messages = [message for _, message in passed]
    try:
        prepared = await _convert(sink, messages) if messages else None
    except Exception:
        # The bulk did not convert: one message at a time finds the ones that do not.
        messages = []
        for entry, message in passed:
            try:
                await _convert(sink, [message])
            except Exception as exc:
                failures.append(Failure(entry, Stage.CONVERT, None, exc))
            else:
                messages.append(message)
        prepared = await _convert(sink, messages) if messages else None
    if failures:
        failures.sort(key=lambda failure: failure.entry.offset)
        await dead_letter(failures)
    return len(messages), prepared


async def write_bulk(sink: Sink, bulk: Bulk, stream: object) -> None:
    if bulk.error is not None:
        raise bulk.error
    if not bulk.count:
        return
    if isinstance(sink, PipelinedSink):
        await sink.write_prepared(bulk.prepared, stream)
    else:
        await sink.write(bulk.prepared)


class Sending:
    """Bulks handed to a sink, confirmed oldest first as their writes finish (`confirm` moves the
    writer's offset). A PipelinedSink gets the next bulk while it still writes the previous one (it
    writes them in order, and not at all once an earlier one failed), so its target never waits for
    the engine; any other sink gets a bulk only once the previous one is confirmed."""

    def __init__(self, sink: Sink, confirm: Callable[[Bulk, Exception | None], Awaitable[bool]]) -> None:
        self.sink = sink
        self.depth = 2 if isinstance(sink, PipelinedSink) else 1
        self._confirm = confirm
        self._writes: deque[asyncio.Task[bool]] = deque()
        self._stream = object()  # once one of its bulks failed, the sink writes none of the later ones

    async def send(self, bulk: Bulk) -> bool:
        """Hands the bulk over once there is room; False when an earlier bulk failed (the writer stops)."""
        while self._writes and (len(self._writes) >= self.depth or self._writes[0].done()):
            if not await self._writes.popleft():
                return False
        previous = self._writes[-1] if self._writes else None
        self._writes.append(asyncio.create_task(self._deliver(bulk, previous)))
        return True

    def failed(self) -> bool:
        """Forgets the confirmed bulks; True when one failed."""
        while self._writes and self._writes[0].done():
            if not self._writes.popleft().result():
                return True
        return False

    async def drain(self) -> bool:
        """Waits for every bulk; False when one failed."""
        while self._writes:
            if not await self._writes.popleft():
                return False
        return True

    async def _deliver(self, bulk: Bulk, previous: asyncio.Task[bool] | None) -> bool:
        error: Exception | None = None
        try:
            await write_bulk(self.sink, bulk, self._stream)
        except Exception as exc:
            error = exc
        if previous is not None and not await previous:
            return False  # an earlier bulk failed: the writer stopped at it
        return await self._confirm(bulk, error)

    async def cancel(self) -> None:
        """Stops waiting for every bulk (a write already running in a sink still finishes)."""
        tasks = list(self._writes)
        self._writes.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
