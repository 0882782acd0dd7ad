"""Composite topics as pure values (the Varadhi design): storage topics, K, produce pointer.

No I/O here: the Kafka adapter (`app.composite.store`) persists these values and
the producers use `CompositeTopic.target` to pick a storage topic and partition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from app.composite.errors import InvalidGroupId, InvalidPartitionCount, ReadPointerOutOfRange
from app.composite.routing import group_hash, route, shard_partitions
from app.errors import InvalidInput

__all__ = [
    "CompositeTopic",
    "StorageTopic",
    "check_group_id",
    "check_partition_count",
    "next_k",
    "storage_topic_name",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,199}$")


def check_partition_count(partitions: int) -> int:
    """The seed allows 1, 2, 3 or any multiple of 4 or 6, so shards divide evenly."""
    if partitions < 1 or not (partitions in (1, 2, 3) or partitions % 4 == 0 or partitions % 6 == 0):
        raise InvalidPartitionCount(
            f"partition count {partitions} is not allowed: use 1, 2, 3 or a multiple of 4 or 6"
        )
    return partitions


def check_group_id(group_id: str, max_bytes: int = 256) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupId("group_id must be a non-empty string")
    if len(group_id.encode("utf-8")) > max_bytes:
        raise InvalidGroupId(f"group_id is longer than {max_bytes} bytes")
    return group_id


def check_topic_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidInput(
            f"composite topic name {name!r} must be 1-200 characters of letters, digits, '_' or '-'"
        )
    return name


def storage_topic_name(name: str, index: int) -> str:
    return f"{name}.{index}"


def next_k(previous: StorageTopic, partitions: int) -> int:
    """The seed's K rule: scale on from the previous topic's base count when it divides."""
    base = previous.partitions // previous.k
    return partitions // base if partitions % base == 0 else 1


@dataclass(frozen=True, slots=True)
class StorageTopic:
    name: str
    partitions: int
    k: int = 1

    def route(self, h: int) -> int:
        return route(h, self.partitions, self.k)

    def shard_partitions(self, shard_id: int, shard_count: int) -> range:
        return shard_partitions(shard_id, shard_count, self.partitions)


@dataclass(frozen=True, slots=True)
class CompositeTopic:
    name: str
    storage_topics: tuple[StorageTopic, ...]
    produce_pointer: int = 0
    version: int = 0
    # When the produce pointer last moved (epoch ms; 0: never, or before this was recorded).
    # Producers may write the storage topic it left until they refresh the definition, so a
    # reader starting up leaves a drained storage topic only once a grace has passed since.
    switched_at_ms: int = 0

    @classmethod
    def create(cls, name: str, partitions: int) -> CompositeTopic:
        check_topic_name(name)
        check_partition_count(partitions)
        return cls(name=name, storage_topics=(StorageTopic(storage_topic_name(name, 0), partitions, 1),))

    @property
    def current(self) -> StorageTopic:
        return self.storage_topics[self.produce_pointer]

    @property
    def partitions(self) -> list[tuple[str, int]]:
        """(storage topic, partition) of every partition of every storage topic, in order."""
        return [(s.name, p) for s in self.storage_topics for p in range(s.partitions)]

    def target(self, group_id: str) -> tuple[str, int]:
        """Produce(m): the storage topic at the produce pointer and Router(hash(m))."""
        topic = self.current
        return topic.name, topic.route(group_hash(group_id))

    def add_storage_topic(self, partitions: int, k: int | None = None) -> CompositeTopic:
        """AddStorageTopic: append a topic; K per the seed unless given (a subscription's retry or
        dead-letter topic routing exactly like a main storage topic); the produce pointer does not
        move."""
        check_partition_count(partitions)
        if k is None:
            k = next_k(self.storage_topics[-1], partitions)
        elif k < 1 or partitions % k:
            raise InvalidInput(f"K={k} must be at least 1 and divide the {partitions} partitions")
        index = len(self.storage_topics)
        new = StorageTopic(storage_topic_name(self.name, index), partitions, k)
        return replace(self, storage_topics=(*self.storage_topics, new), version=self.version + 1)

    def switch_produce(self, now_ms: int = 0) -> CompositeTopic:
        """SwitchProduce: move to the next storage topic (at `now_ms`); stay put at the last one."""
        pointer = min(self.produce_pointer + 1, len(self.storage_topics) - 1)
        switched = now_ms if pointer != self.produce_pointer else self.switched_at_ms
        return replace(self, produce_pointer=pointer, version=self.version + 1, switched_at_ms=switched)

    def switched_within(self, now_ms: int, grace_s: float, clock_skew_s: float = 0.0) -> bool:
        """Did the produce pointer move less than `grace_s` before `now_ms`? (Producers holding the
        older definition may still write the storage topics it left.) The switch time is read on
        the clock of the host that switched: `now_ms`'s clock may run up to `clock_skew_s` ahead
        of it, which would make the switch look older than it is."""
        return now_ms - self.switched_at_ms < (grace_s + clock_skew_s) * 1000

    def storage(self, read_pointer: int, partition: int | None = None) -> StorageTopic:
        """The storage topic for Consume(r, p', offset); refuses pointers out of range."""
        if not 0 <= read_pointer < len(self.storage_topics):
            raise ReadPointerOutOfRange(
                f"{self.name}: read pointer {read_pointer} outside 0..{len(self.storage_topics) - 1}"
            )
        topic = self.storage_topics[read_pointer]
        if partition is not None and not 0 <= partition < topic.partitions:
            raise ReadPointerOutOfRange(
                f"{topic.name}: partition {partition} outside 0..{topic.partitions - 1}"
            )
        return topic

    def index_of(self, storage_topic_name: str) -> int:
        for index, topic in enumerate(self.storage_topics):
            if topic.name == storage_topic_name:
                return index
        raise ReadPointerOutOfRange(f"{storage_topic_name} is not a storage topic of {self.name}")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "produce_pointer": self.produce_pointer,
            "version": self.version,
            "switched_at_ms": self.switched_at_ms,
            "storage_topics": [
                {"name": t.name, "partitions": t.partitions, "k": t.k} for t in self.storage_topics
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompositeTopic:
        return cls(
            name=data["name"],
            produce_pointer=int(data["produce_pointer"]),
            version=int(data.get("version", 0)),
            switched_at_ms=int(data.get("switched_at_ms", 0)),
            storage_topics=tuple(
                StorageTopic(t["name"], int(t["partitions"]), int(t["k"])) for t in data["storage_topics"]
            ),
        )
