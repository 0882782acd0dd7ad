"""What a consumer reads, as a pure value: a plain Kafka topic, or a composite topic's chain of
storage topics read one at a time, in order (`app.composite.advance`).

Key states, retry and DLQ copies live in partition L (a *lane partition*) of the consumer's own
topics, which have the first storage topic's partition count B. A storage topic of P = K·B
partitions (the K rule of composite topics: every topic scaled by a multiple of T_0) routes a key
to a partition q with q // K = the key's partition in T_0, so `T_i[q]` belongs to lane q // K and
a lane's keys stay in its K partitions. A copy reads the storage partitions of its lanes by
assignment (`partitions_of`), whatever the topic's partition count. A storage topic routed on
another base (P not a multiple of B, so K = 1 and keys spread anew) is not read: the copy holds at
the end of the one before (`readable_upto`), as a subscription shard holds where groups would
change shards.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.composite.advance import Drained, read_index
from app.composite.model import CompositeTopic, StorageTopic
from app.composite.routing import partition_for

__all__ = ["Source"]


@dataclass(frozen=True, slots=True)
class Source:
    name: str  # the topic, or the composite topic
    composite: CompositeTopic  # a plain topic is a chain of one storage topic (itself)
    plain: bool
    # Ordering keys are the record keys, which producers route: only then does a lane of a scaled
    # storage topic keep each key in one of its partitions (another key function may not).
    record_keys: bool = True

    @classmethod
    def of_topic(cls, topic: str, partitions: int) -> Source:
        return cls(topic, CompositeTopic(topic, (StorageTopic(topic, partitions),)), True)

    @classmethod
    def of_composite(cls, topic: CompositeTopic, *, record_keys: bool = True) -> Source:
        return cls(topic.name, topic, False, record_keys)

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

    def routed_on_lanes(self, idx: int) -> bool:
        """Whether storage topic `idx` routes keys on T_0's partitions (P = K·B): its partition q
        then belongs to lane q // K (for K > 1 only with record keys as ordering keys)."""
        storage = self.composite.storage_topics[idx]
        if storage.k > 1 and not self.record_keys:
            return False
        return self.composite.storage_topics[0].k == 1 and storage.partitions == storage.k * self.lanes

    @property
    def readable_upto(self) -> int:
        """The last storage index a copy may read: storage topics from 0 on routed on the lanes."""
        upto = 0
        for idx in range(1, len(self.composite.storage_topics)):
            if not self.routed_on_lanes(idx):
                break
            upto = idx
        return upto

    def k_of(self, idx: int) -> int:
        """How many partitions of storage topic `idx` a lane has (its K)."""
        return self.composite.storage_topics[idx].k

    def partitions_of(self, idx: int, lanes: set[int] | frozenset[int]) -> list[int]:
        """The partitions of storage topic `idx` that hold the keys of `lanes`."""
        k = self.k_of(idx)
        return [q for lane in sorted(lanes) for q in range(lane * k, (lane + 1) * k)]

    def partition_of_key(self, idx: int, key: str) -> int:
        """Where the router puts `key` in storage topic `idx` (a key routed as producers do)."""
        storage = self.composite.storage_topics[idx]
        return partition_for(key, storage.partitions, storage.k)

    def read_index(self, idx: int, drained: Drained) -> int:
        """Where a copy at storage index `idx` reads now (the composite topics' rule, held at
        `readable_upto`). `drained`: the group's committed offsets at each partition's end."""
        return max(idx, min(read_index(self.composite, idx, drained), self.readable_upto))

    def held(self, idx: int) -> bool:
        """Whether a copy at `idx` stays there only because the next storage topic routes keys
        on another base than T_0's (its partitions mix the keys of several lanes)."""
        return idx == self.readable_upto and idx < self.composite.produce_pointer
