"""What the driver decides and broadcasts to the executors (pure values, no Spark, no Kafka).

A *split* is one piece of one input file, named by (file path, byte offset where the split
starts), exactly as Spark's file sources cut files. Rows inside a split arrive in file
order, so a row's position is (split, ordinal within the split). The driver turns split
row counts into absolute row indexes per file (ids stay the same however Spark splits the
files) and, for tracked batches, split valid-row counts into a global ordinal of each valid
event, which picks its batch item id. Both only depend on the input, so a retried task
sends the same ids and item ids.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from app.settings import BrokerKind

__all__ = [
    "IngestPlan",
    "ItemAssignment",
    "SplitKey",
    "count_by_split",
    "file_identity",
    "item_id_at",
    "item_ids_from",
    "split_offsets",
]

SplitKey = tuple[str, int]  # (file path as Spark names it, split start byte)


@dataclass(frozen=True, slots=True)
class ItemAssignment:
    """An open exact batch and its item groups; the n-th valid event gets the n-th expanded item id."""

    batch_id: str
    groups: tuple[tuple[str, int], ...]  # (group id, upto) in response order

    @property
    def items(self) -> int:
        return sum(upto for _, upto in self.groups)


def item_id_at(assignment: ItemAssignment, ordinal: int) -> str:
    """The item id `batchId:groupId:index` of the `ordinal`-th item (0-based) of the expanded groups."""
    return next(item_ids_from(assignment, ordinal))


def item_ids_from(assignment: ItemAssignment, start: int) -> Iterator[str]:
    """Item ids from the `start`-th on, in order; raises IndexError past the last item."""
    if start < 0:
        raise IndexError(f"item ordinal {start} is negative")
    starts = list(accumulate((upto for _, upto in assignment.groups), initial=0))
    group = bisect_right(starts, start) - 1
    index = start - starts[group] if group < len(assignment.groups) else 0
    while group < len(assignment.groups):
        group_id, upto = assignment.groups[group]
        prefix = f"{assignment.batch_id}:{group_id}:"
        for i in range(index, upto):
            yield prefix + str(i)
        group, index = group + 1, 0
    raise IndexError(f"item ordinal beyond the {assignment.items} items of batch {assignment.batch_id}")


def split_offsets(counts: Mapping[SplitKey, int], per_file: bool) -> dict[SplitKey, int]:
    """Prefix sums of per-split counts in (file, start) order: per file (row indexes) or global (ordinals)."""
    offsets: dict[SplitKey, int] = {}
    running = 0
    current_file: str | None = None
    for key in sorted(counts):
        if per_file and key[0] != current_file:
            current_file, running = key[0], 0
        offsets[key] = running
        running += counts[key]
    return offsets


def file_identity(spark_path: str, root: str) -> str:
    """A file's identity in ids: its path relative to the input root (the root's name when it is a file).

    Spark names files as URIs (`file:/data/in/part-0.parquet`); the root is the user's PATH.
    Relative paths keep ids stable when the input directory is moved or mounted elsewhere.
    """
    path = _strip_scheme(spark_path)
    base = _strip_scheme(root).rstrip("/")
    if path == base:
        return path.rsplit("/", 1)[-1]
    if base and path.startswith(base + "/"):
        return path[len(base) + 1 :]
    return path.rsplit("/", 1)[-1]


def _strip_scheme(path: str) -> str:
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith("file:"):
        path = path[len("file:") :]
    return "/" + path.lstrip("/") if path.startswith("/") else path


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """Everything an executor needs, broadcast once per job."""

    input_root: str
    input_format: str
    # The composite topic the tasks write: each reads its definition when it starts and every
    # `metadata_refresh_s`, as every producer does, so a produce-pointer switch during the job
    # moves its writes within the readers' switch grace.
    composite_topic: str
    metadata_topic: str
    metadata_refresh_s: float
    max_group_id_bytes: int
    replication_factor: int
    producer_config: Mapping[str, Any]
    max_payload_bytes: int
    row_offsets: Mapping[SplitKey, int] = field(default_factory=dict)  # empty: the reader gives row indexes
    item_offsets: Mapping[SplitKey, int] = field(default_factory=dict)
    items: ItemAssignment | None = None
    flush_every: int = 50_000
    broker_kind: BrokerKind = "embedded"  # KAFKA_BROKER_KIND: which broker the tasks' reads ask
    crash_at: str = ""  # crash points armed in each task's first attempt (tests; see app.crashpoints)

    def row_offset(self, split: SplitKey) -> int:
        return self.row_offsets.get(split, 0) if self.row_offsets else 0


def count_by_split(pairs: Iterable[tuple[str, int, int]]) -> dict[SplitKey, int]:
    """(file, start, count) rows from Spark -> a dict keyed by split."""
    return {(file, int(start)): int(count) for file, start, count in pairs}
