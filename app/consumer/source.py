"""What a consumer reads, as a pure value: a plain Kafka topic, or a composite topic's chain of
storage topics read one at a time, in order (`app.composite.advance`).

Key states, retry and DLQ copies live in partition p of the consumer's own topics, which have the
first storage topic's partition count; a record of storage partition `T_i[p]` belongs to lane
partition p. That holds while T_i routes keys as T_0 does (the same partition count and K), and
only then do Kafka's range assignments give one copy `T_i[p]` and `<name>-retry[p]` together
(every copy subscribes to the same topics, all with that partition count). So a copy does not
read past the last storage topic routed like T_0 (`readable_upto`): it holds at the end of the
one before, as a subscription shard holds where groups would change shards.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.composite.advance import Drained, read_index
from app.composite.model import CompositeTopic, StorageTopic

__all__ = ["Source"]


@dataclass(frozen=True, slots=True)
class Source:
    name: str  # the topic, or the composite topic
    composite: CompositeTopic  # a plain topic is a chain of one storage topic (itself)
    plain: bool

    @classmethod
    def of_topic(cls, topic: str, partitions: int) -> Source:
        return cls(topic, CompositeTopic(topic, (StorageTopic(topic, partitions),)), True)

    @classmethod
    def of_composite(cls, topic: CompositeTopic) -> Source:
        return cls(topic.name, topic, False)

    @property
    def lanes(self) -> int:
        """The partition count of the consumer's own topics: the first storage topic's."""
        return self.composite.storage_topics[0].partitions

    @property
    def topics(self) -> list[str]:
        """The Kafka topics a copy subscribes to (besides `<name>-retry`): every storage topic."""
        return [s.name for s in self.composite.storage_topics]

    def index_of(self, topic: str) -> int | None:
        """The storage index of a Kafka topic; None for a topic not in the source."""
        for i, storage in enumerate(self.composite.storage_topics):
            if storage.name == topic:
                return i
        return None

    @property
    def readable_upto(self) -> int:
        """The last storage index a copy may read: storage topics from 0 on that route like T_0."""
        first = self.composite.storage_topics[0]
        upto = 0
        for storage in self.composite.storage_topics[1:]:
            if (storage.partitions, storage.k) != (first.partitions, first.k):
                break
            upto += 1
        return upto

    def read_index(self, idx: int, drained: Drained) -> int:
        """Where a copy at storage index `idx` reads now (the composite topics' rule, held at
        `readable_upto`). `drained`: the group's committed offsets at each partition's end."""
        return max(idx, min(read_index(self.composite, idx, drained), self.readable_upto))

    def held(self, idx: int) -> bool:
        """Whether a copy at `idx` stays there only because the next storage topic routes keys
        unlike T_0 (its records would belong to other lane partitions)."""
        return idx == self.readable_upto and idx < self.composite.produce_pointer

    def reads(self, topic: str, partition: int, idx: int, lanes: set[int] | frozenset[int]) -> bool:
        """Whether a copy reading storage index `idx` and owning lane partitions `lanes` reads
        `topic[partition]` (a storage topic's partition) now."""
        at = self.index_of(topic)
        return at is not None and at == idx and partition in lanes
