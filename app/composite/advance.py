"""Which storage topic of a composite topic a reader reads (the Varadhi design, "SwitchProduce"). Pure.

Storage topics are read one at a time, in order, so a group's order holds across SwitchProduce:
a reader leaves T_i for T_{i+1} only once the produce pointer moved past T_i (no producer
writes T_i any more) and every partition of T_i it is judged on is drained (consumed to its
end). Which partitions count, and what "drained" means (a shard's own positions, or a consumer
group's committed offsets), is the caller's: it passes the facts, this decides.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.composite.errors import ReadPointerOutOfRange
from app.composite.model import CompositeTopic

__all__ = ["Drained", "may_leave", "read_index", "switch_grace"]

Drained = Mapping[int, Mapping[int, bool]]
"""storage topic index -> {partition: drained} for the partitions the reader is judged on there.
A storage topic missing here is not known to be drained."""


def switch_grace(metadata_refresh_s: float) -> float:
    """How long after a produce-pointer switch a reader still expects writes to the storage topic
    the pointer left: producers re-read the definition every `metadata_refresh_s` (the
    COMPOSITE_METADATA_REFRESH_S of the hosts that produce), two refreshes and a second cover one
    that read it just before the switch, and a refresh that came late. Shards and library copies
    wait the same."""
    return 2 * metadata_refresh_s + 1.0


def may_leave(topic: CompositeTopic, idx: int) -> bool:
    """Whether a reader at storage topic `idx` could move on at all (the produce pointer is past
    it): only then are its drained facts worth fetching."""
    _check(topic, idx)
    return idx < topic.produce_pointer


def read_index(topic: CompositeTopic, idx: int, drained: Drained) -> int:
    """The storage topic to read for a reader now at `idx`: past every storage topic, from `idx`
    on, that the produce pointer left and whose partitions in `drained` are all drained. Never
    behind `idx`, never past the produce pointer."""
    _check(topic, idx)
    for storage_idx, flags in drained.items():
        _check(topic, storage_idx)
        partitions = topic.storage_topics[storage_idx].partitions
        bad = [p for p in flags if not 0 <= p < partitions]
        if bad:
            raise ReadPointerOutOfRange(
                f"{topic.storage_topics[storage_idx].name}: partitions {bad} outside 0..{partitions - 1}"
            )
    while idx < topic.produce_pointer:
        facts = drained.get(idx)
        if facts is None or not all(facts.values()):
            break
        idx += 1
    return idx


def _check(topic: CompositeTopic, idx: int) -> None:
    if not 0 <= idx < len(topic.storage_topics):
        raise ReadPointerOutOfRange(
            f"{topic.name}: storage topic {idx} outside 0..{len(topic.storage_topics) - 1}"
        )
