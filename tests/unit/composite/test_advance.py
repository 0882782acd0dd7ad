"""The storage-topic order rule (`app.composite.advance`): checked against a plain restatement
over every small chain, produce pointer, reader position and combination of drained facts."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from app.composite.advance import Drained, may_leave, read_index
from app.composite.errors import ReadPointerOutOfRange
from app.composite.model import CompositeTopic, StorageTopic


def chain(partitions: tuple[int, ...], pointer: int) -> CompositeTopic:
    topic = CompositeTopic.create("c", partitions[0])
    for count in partitions[1:]:
        topic = topic.add_storage_topic(count)
    for _ in range(pointer):
        topic = topic.switch_produce()
    return topic


def reference(topic: CompositeTopic, idx: int, drained: Drained) -> int:
    """The furthest storage topic j >= idx such that every topic from idx up to j is one the
    produce pointer left and whose known partitions all drained."""

    def left_and_drained(i: int) -> bool:
        return i < topic.produce_pointer and i in drained and False not in drained[i].values()

    return max(j for j in range(idx, len(topic.storage_topics)) if all(map(left_and_drained, range(idx, j))))


def facts_of(topic: CompositeTopic) -> Iterator[Drained]:
    """Per storage topic: unknown (absent), or drained flags for every partition, or for a
    subset (a shard's partitions); every combination."""
    per_storage: list[list[dict[int, bool] | None]] = []
    for storage in topic.storage_topics:
        options: list[dict[int, bool] | None] = [None]
        for size in range(storage.partitions + 1):
            for parts in itertools.combinations(range(storage.partitions), size):
                for flags in itertools.product((False, True), repeat=size):
                    options.append(dict(zip(parts, flags, strict=True)))
        per_storage.append(options)
    for combo in itertools.product(*per_storage):
        yield {i: f for i, f in enumerate(combo) if f is not None}


def test_read_index_matches_the_reference_on_every_small_chain() -> None:
    cases = 0
    for length in (1, 2, 3):
        for partitions in itertools.product((1, 2, 3), repeat=length):
            for pointer in range(length):
                topic = chain(partitions, pointer)
                for drained in facts_of(topic):
                    for idx in range(length):
                        got = read_index(topic, idx, drained)
                        assert got == reference(topic, idx, drained), (partitions, pointer, idx, drained)
                        assert idx <= got <= max(idx, pointer)
                        assert may_leave(topic, idx) == (idx < pointer)
                        if not may_leave(topic, idx):
                            assert got == idx, "nothing moves a reader the produce pointer has not left"
                        cases += 1
    assert cases > 100_000


def test_a_reader_waits_for_the_pointer_and_for_every_partition() -> None:
    topic = chain((2, 2), 0)
    assert read_index(topic, 0, {0: {0: True, 1: True}}) == 0, "the produce pointer is still at T_0"
    switched = topic.switch_produce()
    assert read_index(switched, 0, {0: {0: True, 1: False}}) == 0
    assert read_index(switched, 0, {0: {0: True, 1: True}}) == 1
    assert read_index(switched, 0, {}) == 0, "unknown is not drained"
    assert read_index(switched, 1, {}) == 1


def test_a_reader_skips_several_drained_topics_in_one_decision() -> None:
    topic = chain((1, 2, 4), 2)
    assert read_index(topic, 0, {0: {0: True}, 1: {0: True, 1: True}}) == 2
    assert read_index(topic, 0, {0: {0: True}, 1: {0: True, 1: False}}) == 1
    assert read_index(topic, 0, {0: {0: True}}) == 1


def test_facts_outside_the_definition_are_refused() -> None:
    topic = chain((2,), 0)
    with pytest.raises(ReadPointerOutOfRange):
        read_index(topic, 1, {})
    with pytest.raises(ReadPointerOutOfRange):
        read_index(topic, 0, {1: {0: True}})
    with pytest.raises(ReadPointerOutOfRange):
        read_index(topic, 0, {0: {2: True}})
    with pytest.raises(ReadPointerOutOfRange):
        may_leave(CompositeTopic("c", (StorageTopic("c.0", 1),)), -1)
