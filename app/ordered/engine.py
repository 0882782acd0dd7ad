"""What the ordered-delivery engine does with one record whose group's turn has come (Varadhi's
message consumption): decide with the GroupState rules, deliver, or hand the record to RQ (a
retry, or sidelined behind its group's waiting messages) or to DLQ, and record the group's new
state once the broker confirmed the copy. The state is put before the call returns, so the
record's offset may be committed after it.

Both hosts run it: the subscription platform's shards and the consumer library's copies. Ports
(`app.ordered.ports`) keep it free of Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from enum import StrEnum

from app.errors import HubstreamError
from app.ordered.errors import CopyRefused, DeliveryFailed
from app.ordered.policy import OnDlq, RetryPolicy
from app.ordered.ports import Deliver, GroupStates, Queues
from app.ordered.records import FailureInfo, InternalMeta, encode_internal
from app.ordered.rules import (
    Action,
    GroupState,
    MessageState,
    decide_main,
    decide_retry,
    on_dead_lettered,
    on_delivered,
    on_sidelined,
    on_skipped,
)
from app.ordered.work import RecordStub, Work

__all__ = ["Engine", "Outcome"]

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    DELIVERED = "delivered"
    FILTERED = "filtered"
    RETRYING = "retrying"  # failed; a copy waits in RQ
    SIDELINED = "sidelined"  # behind its group's waiting messages; not a failure
    DEAD_LETTERED = "dead_lettered"
    SKIPPED = "skipped"  # handled before a crash: a replay


class Engine:
    """`generation`: the main topic's rewind epoch (an offset reset bumps it: older `handled`
    marks no longer apply). `message_id(work)`: the id a copy of a main record carries."""

    def __init__(
        self,
        retry: RetryPolicy,
        on_dlq: OnDlq,
        states: GroupStates,
        queues: Queues,
        deliver: Deliver,
        message_id: Callable[[Work], str],
        *,
        generation: int = 0,
        clock: Callable[[], float] = time.time,
        log_context: Mapping[str, str] | None = None,
    ) -> None:
        self.retry = retry
        self.on_dlq = on_dlq
        self.states = states
        self.queues = queues
        self.deliver = deliver
        self.message_id = message_id
        self.generation = generation
        self.clock = clock
        self.log_context = dict(log_context or {})  # e.g. {"subscription": name}: JSON logs' fields

    def _about(self, work: Work) -> dict[str, object]:
        """The ids a log line about `work` carries as fields (app.observability.json_logs)."""
        rec = work.record
        return {
            **self.log_context,
            "message_id": self.message_id(work),
            "group_id": work.ordering_key,
            "topic": rec.topic,
            "partition": rec.partition,
            "offset": rec.offset,
        }

    def decide(self, work: Work, state: GroupState | None) -> Action:
        read = work.read
        if read is None:
            return decide_main(state, work.main, self.on_dlq, self.generation)
        return decide_retry(state, work.main, read.internal, self.on_dlq)

    async def run(self, work: Work) -> Outcome:
        if work.undecodable:
            return await self.undecodable(work)
        state = self.states.get(*work.lane)
        action = self.decide(work, state)
        if action is not Action.DELIVER:
            return await self.not_delivered(work, action)
        try:
            kept = await self.deliver(work)
        except Exception as exc:  # the endpoint's failure decides retry vs DLQ; the host goes on
            return await self.failed(work, exc)
        return await self.delivered(work, filtered=not kept)

    # -- outcomes -------------------------------------------------------------------------------
    async def delivered(self, work: Work, *, filtered: bool = False) -> Outcome:
        """The endpoint confirmed (or the filter dropped it). A group that never failed keeps no
        state (the fast path)."""
        state = self.states.get(*work.lane)
        await self._put(work, state, on_delivered(state, work.main, work.read, self.generation))
        return Outcome.FILTERED if filtered else Outcome.DELIVERED

    async def not_delivered(self, work: Work, action: Action) -> Outcome:
        """SKIP, or sideline behind the group's pending messages, or follow a DLQ'd one to DLQ."""
        state = self.states.get(*work.lane)
        if action is Action.SKIP:
            await self._put(work, state, on_skipped(state, work.read))
            return Outcome.SKIPPED
        if action is Action.SIDELINE:
            return await self._to_retry(work, self._meta(work, due_ms=self._now_ms()), failed=False)
        failure = self._failure(
            work, "GroupBlocked", "an earlier message of the group is in DLQ", "follows-blocked-group"
        )
        return await self._to_dlq(work, self._meta(work, failure=failure))

    async def failed(self, work: Work, exc: BaseException) -> Outcome:
        """The endpoint did not take the message: retry via RQ, or DLQ (replays never retry)."""
        failed = (work.meta.failed_attempts if work.meta is not None else 0) + 1
        replay = work.meta is not None and work.meta.replay
        reason = "replay-failed" if replay else "failed"
        failure = self._failure(work, type(exc).__name__, str(exc), reason)
        by_type = exc.retriable if isinstance(exc, HubstreamError) else True
        status, timed_out = (exc.status, exc.timed_out) if isinstance(exc, DeliveryFailed) else (None, False)
        if (
            not replay
            and self.retry.is_retriable(by_type, status, timed_out)
            and self.retry.may_retry(failed)
        ):
            due = self._now_ms() + int(self.retry.delay_s(failed) * 1000)
            meta = self._meta(work, failed=failed, due_ms=due, failure=failure)
            return await self._to_retry(work, meta, failed=True)
        return await self._to_dlq(work, self._meta(work, failed=failed, failure=failure))

    async def undecodable(self, work: Work) -> Outcome:
        """A record without a usable ordering key or hs-* headers: to DLQ, recorded in no state."""
        failure = self._failure(work, "UndecodableMessage", work.undecodable, "undecodable")
        await self._dead_letter(work, self._meta(work, failure=failure))
        log.warning(
            "%s: undecodable record sent to DLQ: %s", work.where, work.undecodable, extra=self._about(work)
        )
        return Outcome.DEAD_LETTERED

    # -- RQ and DLQ -----------------------------------------------------------------------------
    async def _to_retry(self, work: Work, meta: InternalMeta, *, failed: bool) -> Outcome:
        """Hand the message to RQ (confirmed by the broker), then record the group as sidelined.
        A copy RQ refuses for good (too large for it) goes to DLQ, the reason in its headers:
        retrying the write at every restart would hold the group, and the host, for ever."""
        try:
            at = await self.queues.to_retry(work, encode_internal(meta, work.record.headers))
        except CopyRefused as exc:
            failure = self._failure(work, "RecordRefused", f"RQ refused the copy: {exc}", "rq-refused")
            return await self._to_dlq(work, _with(meta, failure, meta.failed_attempts))
        if failed and meta.failure is not None:
            log.info(
                "%s: group %s to RQ after %d failed attempt(s): %s: %s",
                work.where,
                work.ordering_key,
                meta.failed_attempts,
                meta.failure.error_class,
                meta.failure.error,
                extra=self._about(work),
            )
        state = self.states.get(*work.lane)
        written = MessageState.at(work.main, at)
        new = on_sidelined(
            state, work.main, written, failed=failed, read_from_rq=work.read, generation=self.generation
        )
        await self._put(work, state, new)
        return Outcome.RETRYING if failed else Outcome.SIDELINED

    async def _to_dlq(self, work: Work, meta: InternalMeta) -> Outcome:
        """Hand the message to DLQ (confirmed by the broker), then record the group's DLQ state."""
        at = await self._dead_letter(work, meta)
        failure = meta.failure
        log.warning(
            "%s: group %s to DLQ (%s): %s: %s",
            work.where,
            work.ordering_key,
            failure.reason if failure else "failed",
            failure.error_class if failure else "?",
            failure.error if failure else "",
            extra=self._about(work),
        )
        state = self.states.get(*work.lane)
        written = MessageState.at(work.main, at)
        await self._put(work, state, on_dead_lettered(state, work.main, written, work.read, self.generation))
        return Outcome.DEAD_LETTERED

    async def _dead_letter(self, work: Work, meta: InternalMeta) -> tuple[int, int]:
        """The DLQ copy; when DLQ refuses it for good, a stub in its place: no payload nor headers
        of its own, the reason and the message's source (it stays in its main topic)."""
        try:
            return await self.queues.to_dlq(work, encode_internal(meta, work.record.headers))
        except CopyRefused as exc:
            log.error("%s: DLQ refused the copy (%s); a stub takes its place", work.where, exc)
            reason = f"DLQ refused the copy ({exc}); the message is at {work.source}"
            failure = self._failure(work, "RecordRefused", reason, "dlq-refused")
            rec = work.record
            stub = RecordStub(rec.topic, rec.partition, rec.offset, rec.key)
            stubbed = Work(stub, work.partition, work.ordering_key, work.meta, work.undecodable)
            return await self.queues.to_dlq(stubbed, encode_internal(_with(meta, failure), ()))

    # -- helpers --------------------------------------------------------------------------------
    async def _put(self, work: Work, old: GroupState | None, new: GroupState | None) -> None:
        if new is not None and new != old:
            await self.states.put(*work.lane, new)

    def _meta(
        self, work: Work, *, failed: int | None = None, due_ms: int = 0, failure: FailureInfo | None = None
    ) -> InternalMeta:
        """The hs-* metadata of a copy of `work`: its main place, id and attempts (kept from the
        copy read, or counted anew), when it is due, why it failed."""
        base = work.meta
        attempts = failed if failed is not None else (base.failed_attempts if base is not None else 0)
        return InternalMeta(
            main=work.main,
            main_partition=base.main_partition if base is not None else work.record.partition,
            message_id=base.message_id if base is not None else self.message_id(work),
            failed_attempts=attempts,
            due_ms=due_ms,
            replay=base is not None and base.replay,  # a replay sidelined again stays one
            failure=failure,
        )

    def _failure(self, work: Work, error_class: str, error: str, reason: str) -> FailureInfo:
        return FailureInfo(error_class, error, work.source, self._now_ms(), reason)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)


def _with(meta: InternalMeta, failure: FailureInfo, failed: int | None = None) -> InternalMeta:
    """`meta` as a DLQ copy carries it: not due, with this failure."""
    attempts = meta.failed_attempts if failed is None else failed
    return InternalMeta(meta.main, meta.main_partition, meta.message_id, attempts, 0, meta.replay, failure)
