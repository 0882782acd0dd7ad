"""Exact batches: a bitfield per item group, complete when closed and no bit is left set.

Pure state machine over one table partition (`BatchStore`). Every operation is synchronous,
so on one event loop a read-modify-write is never interleaved with another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import orjson

from app.batch import bitfield
from app.batch.errors import BatchClosed, BatchNotFound, ItemNotFound
from app.batch.ids import GroupAcks, ItemGroup
from app.batch.model import (
    EXACT_PREFIX,
    BatchStore,
    Completion,
    ExactBatch,
    decode_group,
    encode_group,
    exact_key,
    group_key,
    group_prefix,
    request_key,
    request_prefix,
    sequence_key,
)
from app.errors import InvalidInput

__all__ = ["AckOutcome", "ExactRules", "Removal", "SortedAcks"]


@dataclass(frozen=True)
class Removal:
    batches_removed: int
    items_removed: int

    def __add__(self, other: Removal) -> Removal:
        return Removal(self.batches_removed + other.batches_removed, self.items_removed + other.items_removed)


@dataclass(frozen=True)
class AckOutcome:
    items_cleared: int
    completions: tuple[Completion, ...]


@dataclass(frozen=True)
class SortedAcks:
    """An ack's ids by what can be done with them now (`ExactRules.sort`)."""

    valid: tuple[GroupAcks, ...] = ()
    # ids that can never apply, with the reason: their batch existed and is gone (its id is below
    # the partition's counter) ...
    gone: tuple[tuple[GroupAcks, str], ...] = ()
    # ... or the batch exists without such an item
    missing: tuple[tuple[GroupAcks, str], ...] = ()
    # ids of a batch this partition never created (its id is at or past the counter): a worker
    # holding a partition it lost may not know the batch yet
    unknown: tuple[GroupAcks, ...] = ()

    @property
    def refused(self) -> tuple[tuple[GroupAcks, str], ...]:
        """Every id that can never apply, with why."""
        return self.gone + self.missing


@dataclass(frozen=True)
class ExactRules:
    group_size_items: int
    max_items_per_add: int

    # Bytes an add writes per item group beside its bitfield (the group's key and lengths, and its
    # entry in the answer kept for a retried request: ~120 with a 20-digit batch id), with room;
    # and for the batch header.
    GROUP_OVERHEAD_BYTES: ClassVar[int] = 160
    HEADER_BYTES: ClassVar[int] = 1024
    # A batch header's key and lengths in an intent beside its encoded value (`x/` and a 20-digit id).
    BATCH_KEY_BYTES: ClassVar[int] = 32

    def largest_add(self, max_bytes: int) -> int:
        """The most items one add may take for all its writes to fit in `max_bytes` (its intent)."""
        return self.groups_per_operation(max_bytes) * self.group_size_items

    def groups_per_operation(self, max_bytes: int) -> int:
        """Item groups one operation may write for its intent to fit in `max_bytes` (at least 1)."""
        per_group = self.GROUP_OVERHEAD_BYTES + (self.group_size_items + 7) // 8
        return max(1, (max_bytes - self.HEADER_BYTES) // per_group)

    def ack_parts(
        self, acks: Sequence[GroupAcks], max_bytes: int, batch_bytes: Mapping[int, int]
    ) -> list[list[GroupAcks]]:
        """`acks` in order, cut into parts whose writes fit in `max_bytes` (one intent record):
        each item group touched writes its bitfield, and each batch touched its header, whose
        encoded size `batch_bytes` gives (an ack spread over many batches writes many headers)."""
        per_group = self.GROUP_OVERHEAD_BYTES + (self.group_size_items + 7) // 8
        budget = max_bytes - self.HEADER_BYTES  # room for the record's own framing
        parts: list[list[GroupAcks]] = [[]]
        groups: set[tuple[int, str]] = set()
        batches: set[int] = set()
        used = 0
        for ack in acks:
            group = (ack.batch_id, ack.group_id)
            header = self.BATCH_KEY_BYTES + batch_bytes.get(ack.batch_id, self.HEADER_BYTES)
            cost = (per_group if group not in groups else 0) + (header if ack.batch_id not in batches else 0)
            if cost and used + cost > budget and parts[-1]:
                parts.append([])
                groups, batches, used = set(), set(), 0
                cost = per_group + header
            groups.add(group)
            batches.add(ack.batch_id)
            used += cost
            parts[-1].append(ack)
        return parts

    def create(
        self, store: BatchStore, partition: int, partitions: int, user_key: str | None, now_ms: int
    ) -> ExactBatch:
        """A new open batch; its id is `sequence * partitions + partition`, unique across workers."""
        raw = store.get(sequence_key(partition))
        sequence = int(raw) if raw is not None else 1
        store.put(sequence_key(partition), b"%d" % (sequence + 1))
        batch = ExactBatch(sequence * partitions + partition, user_key, False, 0, 0, 0, now_ms, now_ms)
        store.put(exact_key(batch.batch_id), batch.encode())
        return batch

    def get(self, store: BatchStore, batch_id: int) -> ExactBatch:
        raw = store.get(exact_key(batch_id))
        if raw is None:
            raise BatchNotFound(f"exact batch {batch_id} does not exist")
        return ExactBatch.decode(batch_id, raw)

    def add_items(
        self,
        store: BatchStore,
        batch_id: int,
        items: int,
        now_ms: int,
        new_group_id: Callable[[], str],
        request_id: str | None = None,
    ) -> list[ItemGroup]:
        """New item groups; with a `request_id` seen before for this batch, the groups that call got
        (a client retrying after a lost answer must learn the groups it created, not make more)."""
        if isinstance(items, bool) or not isinstance(items, int) or not 1 <= items <= self.max_items_per_add:
            raise InvalidInput(f"items must be an integer from 1 to {self.max_items_per_add}, got {items!r}")
        batch = self.get(store, batch_id)
        if request_id is not None:
            answered = store.get(request_key(exact_key(batch_id), request_id))
            if answered is not None:
                return [ItemGroup(g, upto) for g, upto in orjson.loads(answered)]
        if batch.is_closed:
            raise BatchClosed(f"exact batch {batch_id} is closed; no items can be added")
        groups: list[ItemGroup] = []
        left = items
        while left:
            upto = min(left, self.group_size_items)
            group = ItemGroup(new_group_id(), upto)
            store.put(group_key(batch_id, group.id), encode_group(upto, bitfield.filled(upto)))
            groups.append(group)
            left -= upto
        store.put(
            exact_key(batch_id),
            replace(
                batch,
                pending_items=batch.pending_items + items,
                total_items=batch.total_items + items,
                groups=batch.groups + len(groups),
                updated_at_ms=now_ms,
            ).encode(),
        )
        if request_id is not None:
            answer = orjson.dumps([(g.id, g.upto) for g in groups])
            store.put(request_key(exact_key(batch_id), request_id), answer)
        return groups

    def close(self, store: BatchStore, batch_id: int, now_ms: int) -> tuple[ExactBatch, Completion | None]:
        """Close (idempotent); the completion while one is due (complete, none confirmed yet)."""
        batch = self.get(store, batch_id)
        closed = replace(batch, is_closed=True, updated_at_ms=now_ms)
        if not batch.is_closed:
            store.put(exact_key(batch_id), closed.encode())
        if closed.completion_due:
            return closed, Completion("exact", batch_id, batch.user_key, now_ms)
        return closed, None

    def confirm_completion(self, store: BatchStore, batch_id: int) -> None:
        """The broker confirmed the batch's completion event: stop emitting it."""
        raw = store.get(exact_key(batch_id))
        if raw is not None:
            batch = ExactBatch.decode(batch_id, raw)
            if not batch.completion_confirmed:
                store.put(exact_key(batch_id), replace(batch, completion_confirmed=True).encode())

    def ack(self, store: BatchStore, acks: Sequence[GroupAcks], now_ms: int) -> AckOutcome:
        """Clear the acked bits. Everything is checked before anything is written, so a bad id
        (unknown batch -> BatchNotFound, unknown group or index -> ItemNotFound) changes nothing."""
        batches, groups = self.check(store, acks)
        return self._apply(store, acks, batches, groups, now_ms)

    def sort(
        self, store: BatchStore, partition: int, partitions: int, acks: Sequence[GroupAcks]
    ) -> SortedAcks:
        """Split `acks` (all of batches of `partition`) by whether they can apply (nothing is
        written). A batch id's sequence below the partition's counter was handed out here, so a
        batch of it that is missing was deleted: its acks are refused at once, never waited for."""
        raw = store.get(sequence_key(partition))
        next_sequence = int(raw) if raw is not None else 1
        valid: list[GroupAcks] = []
        gone: list[tuple[GroupAcks, str]] = []
        missing: list[tuple[GroupAcks, str]] = []
        unknown: list[GroupAcks] = []
        groups: dict[bytes, int | None] = {}  # group key -> its item count (None: no such group)
        for ack in acks:
            if store.get(exact_key(ack.batch_id)) is None:
                if ack.batch_id // partitions < next_sequence:
                    gone.append(
                        (ack, f"exact batch {ack.batch_id} no longer exists (closed and expired, or reaped)")
                    )
                else:
                    unknown.append(ack)
                continue
            key = group_key(ack.batch_id, ack.group_id)
            if key not in groups:
                found = store.get(key)
                groups[key] = None if found is None else decode_group(found)[0]
            upto = groups[key]
            if upto is None:
                missing.append((ack, f"item group {ack.batch_id}:{ack.group_id} does not exist"))
            elif max(ack.indexes, default=0) < upto:
                valid.append(ack)
            else:  # per item: those the group has apply
                inside = tuple(i for i in ack.indexes if i < upto)
                outside = tuple(i for i in ack.indexes if i >= upto)
                if inside:
                    valid.append(replace(ack, indexes=inside))
                reason = f"item group {ack.batch_id}:{ack.group_id} has {upto} items"
                missing.append((replace(ack, indexes=outside), reason))
        return SortedAcks(tuple(valid), tuple(gone), tuple(missing), tuple(unknown))

    def check(
        self, store: BatchStore, acks: Sequence[GroupAcks]
    ) -> tuple[dict[int, ExactBatch], dict[bytes, tuple[int, bytearray]]]:
        """Load what `acks` touch; BatchNotFound / ItemNotFound for the first id that names nothing."""
        batches: dict[int, ExactBatch] = {}
        groups: dict[bytes, tuple[int, bytearray]] = {}
        for ack in acks:
            if ack.batch_id not in batches:
                batches[ack.batch_id] = self.get(store, ack.batch_id)
            key = group_key(ack.batch_id, ack.group_id)
            if key not in groups:
                raw = store.get(key)
                if raw is None:
                    raise ItemNotFound(f"item group {ack.batch_id}:{ack.group_id} does not exist")
                groups[key] = decode_group(raw)
            upto = groups[key][0]
            too_big = max(ack.indexes, default=0)
            if too_big >= upto:
                raise ItemNotFound(
                    f"item {ack.batch_id}:{ack.group_id}:{too_big} does not exist "
                    f"(the group has {upto} items)"
                )
        return batches, groups

    def _apply(
        self,
        store: BatchStore,
        acks: Sequence[GroupAcks],
        batches: dict[int, ExactBatch],
        groups: dict[bytes, tuple[int, bytearray]],
        now_ms: int,
    ) -> AckOutcome:
        cleared_by_batch: dict[int, int] = dict.fromkeys(batches, 0)
        changed: set[bytes] = set()
        for ack in acks:
            key = group_key(ack.batch_id, ack.group_id)
            bits = groups[key][1]
            cleared = bitfield.clear_bits(bits, ack.indexes) if bits else 0
            if cleared:
                cleared_by_batch[ack.batch_id] += cleared
                changed.add(key)
        for key in changed:
            upto, bits = groups[key]
            store.put(key, encode_group(upto, b"" if bitfield.is_empty(bits) else bits))
        completions: list[Completion] = []
        for batch_id, cleared in cleared_by_batch.items():
            after = batches[batch_id]
            if cleared:
                after = replace(after, pending_items=after.pending_items - cleared, updated_at_ms=now_ms)
                store.put(exact_key(batch_id), after.encode())
            if after.completion_due:  # also for an ack that cleared nothing: a redelivered last ack
                completions.append(Completion("exact", batch_id, after.user_key, now_ms))
        return AckOutcome(sum(cleared_by_batch.values()), tuple(completions))

    def delete(self, store: BatchStore, batch: ExactBatch) -> Removal:
        for prefix in (group_prefix(batch.batch_id), request_prefix(exact_key(batch.batch_id))):
            for key, _ in list(store.scan(prefix)):
                store.delete(key)
        store.delete(exact_key(batch.batch_id))
        return Removal(1, batch.total_items)

    def expire(self, store: BatchStore, closed: bool, not_updated_since_ms: int) -> Removal:
        """Delete the closed (or open) batches with no activity after `not_updated_since_ms`."""
        removal = Removal(0, 0)
        for key, raw in list(store.scan(EXACT_PREFIX)):
            batch = ExactBatch.decode(int(key[len(EXACT_PREFIX) :]), raw)
            if batch.is_closed == closed and batch.updated_at_ms <= not_updated_since_ms:
                removal += self.delete(store, batch)
        return removal
