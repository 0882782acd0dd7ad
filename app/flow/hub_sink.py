"""Batch sink for the `data-available` subscription: decode each message as a DataAvailable,
save the batch into the message hub (per-recipient order kept), then ack the events' batch
items and wait until the broker confirmed the acks.

Outcome per message (the subscription's batch-sink contract): None when saved and acked; an
InvalidInput for a message that cannot be decoded or validated (it goes to DLQ with the reason);
the hub's error for the event that failed to save; NotAttempted for a group's messages after its
first failure. Save is idempotent by event id, so a redelivered batch saves nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson

from app.batch.ids import group_item_ids
from app.crashpoints import crash_point
from app.dataavailable import DataAvailable, parse
from app.errors import HubstreamError, InvalidInput, ServiceUnavailable
from app.subscription.errors import NotAttempted
from app.subscription.records import SubscriptionMessage

__all__ = ["AckSender", "HubSink", "Saver"]

Outcome = BaseException | None


class Saver(Protocol):
    async def save(self, events: Sequence[DataAvailable]) -> object: ...


class AckSender(Protocol):
    def send(self, item_ids: Sequence[str]) -> int: ...
    def flush(self, timeout_s: float = 30.0) -> int: ...


class AcksNotConfirmed(ServiceUnavailable):
    """The broker did not confirm the batch acks in time; the batch will be delivered again."""


@dataclass
class HubSink:
    hub: Callable[[], Awaitable[Saver]]
    acks: AckSender
    ack_timeout_s: float = 30.0
    max_payload_bytes: int = 1_048_576  # MAX_PAYLOAD_BYTES: larger payloads are refused (DLQ)

    async def __call__(self, messages: Sequence[SubscriptionMessage]) -> list[Outcome]:
        outcomes: list[Outcome] = [None] * len(messages)
        events: dict[int, DataAvailable] = {}
        failed_groups: set[str] = set()
        for index, message in enumerate(messages):
            if message.group_id in failed_groups:
                outcomes[index] = NotAttempted(f"an earlier message of group {message.group_id} failed")
                continue
            try:
                events[index] = self._decode(message)
            except HubstreamError as exc:
                outcomes[index] = exc
                failed_groups.add(message.group_id)
        try:
            await self._save(await self._open_hub(), messages, events, outcomes)
        except HubstreamError as exc:
            return [exc if outcome is None else outcome for outcome in outcomes]
        item_ids = [item for i, e in events.items() if outcomes[i] is None and (item := e.batch_item_id)]
        if item_ids:
            try:
                await self._ack(item_ids)
            except HubstreamError as exc:  # saved but not acked: deliver again (the save is a no-op)
                return [exc if outcome is None else outcome for outcome in outcomes]
        return outcomes

    async def _open_hub(self) -> Saver:
        try:
            return await self.hub()
        except HubstreamError:
            raise
        except Exception as exc:  # the batch is delivered again; the reason names what failed
            raise ServiceUnavailable(f"message hub not open: {type(exc).__name__}: {exc}") from exc

    def _decode(self, message: SubscriptionMessage) -> DataAvailable:
        if len(message.payload) > self.max_payload_bytes:
            raise InvalidInput(
                f"payload of {len(message.payload)} bytes exceeds MAX_PAYLOAD_BYTES={self.max_payload_bytes}"
            )
        try:
            event = parse(orjson.loads(message.payload))
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"payload is not JSON: {exc}") from exc
        if event.recipient != message.group_id:
            raise InvalidInput(f"recipient {event.recipient!r} does not match group id {message.group_id!r}")
        if event.batch_item_id is not None:
            group_item_ids([event.batch_item_id])  # raises naming a malformed id
        return event

    async def _save(
        self,
        hub: Saver,
        messages: Sequence[SubscriptionMessage],
        events: dict[int, DataAvailable],
        outcomes: list[Outcome],
    ) -> None:
        """One save for the whole batch; when it fails, save group by group to find who failed."""
        try:
            await hub.save([events[i] for i in sorted(events)])
            return
        except HubstreamError as exc:
            if exc.retriable:
                raise
        except Exception as exc:
            raise ServiceUnavailable(f"hub save failed: {type(exc).__name__}: {exc}") from exc
        by_group: dict[str, list[int]] = {}
        for index in sorted(events):
            by_group.setdefault(messages[index].group_id, []).append(index)
        for indexes in by_group.values():
            await self._save_group(hub, indexes, events, outcomes)

    async def _save_group(
        self, hub: Saver, indexes: list[int], events: dict[int, DataAvailable], outcomes: list[Outcome]
    ) -> None:
        try:
            await hub.save([events[i] for i in indexes])
            return
        except HubstreamError as exc:
            if exc.retriable:
                raise
        for position, index in enumerate(indexes):  # one at a time to name the failing event
            try:
                await hub.save([events[index]])
            except HubstreamError as exc:
                if exc.retriable:
                    raise
                outcomes[index] = exc
                for later in indexes[position + 1 :]:
                    outcomes[later] = NotAttempted("an earlier event of this recipient failed to save")
                return

    async def _ack(self, item_ids: list[str]) -> None:
        crash_point("flow.sink.before_acks")  # saved, not acked: the batch must come again
        self.acks.send(item_ids)
        left = await asyncio.to_thread(self.acks.flush, self.ack_timeout_s)
        if left:
            raise AcksNotConfirmed(
                f"{left} batch-ack records not confirmed within {self.ack_timeout_s:.0f} s"
            )
