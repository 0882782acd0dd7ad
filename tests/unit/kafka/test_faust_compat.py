"""The two Faust internals the embedded broker's adapter replaces (app.kafka.faust_compat): its
highwater and earliest offset lookups. Pinned here so a Faust upgrade that renames or reshapes
them fails this test, not a worker's recovery on the embedded broker."""

from __future__ import annotations

import inspect
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from app.kafka import faust_compat
from app.kafka.broker import broker_of


def test_the_replaced_methods_are_still_async_lookups_of_partitions() -> None:
    highwaters = faust_aiokafka.AIOKafkaConsumerThread._highwaters
    assert inspect.iscoroutinefunction(highwaters)
    assert list(inspect.signature(highwaters).parameters) == ["self", "partitions"]
    earliest = faust_aiokafka.AIOKafkaConsumerThread.earliest_offsets
    assert inspect.iscoroutinefunction(earliest)
    assert list(inspect.signature(earliest).parameters) == ["self", "partitions"]
    assert inspect.signature(earliest).parameters["partitions"].kind is inspect.Parameter.VAR_POSITIONAL


async def test_the_true_end_wins_over_an_under_reported_highwater(monkeypatch: Any) -> None:
    thread_cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    tp = TP("t", 0)

    async def listed(self: Any, partitions: list[Any]) -> dict[Any, int]:
        return {tp: 11}  # the embedded broker: the base offset of the last batch + 1

    monkeypatch.setattr(thread_cls, "_highwaters", listed)
    monkeypatch.setattr(thread_cls, "earliest_offsets", thread_cls.earliest_offsets)  # restored after
    monkeypatch.setattr(faust_compat, "_installed", {})
    faust_compat.install_recovery_offsets(lambda tps, timeout_s: [15 for _ in tps], lambda tps, timeout_s: [])
    assert thread_cls._highwaters is not listed
    assert await thread_cls._highwaters(object(), [tp]) == {tp: 15}
    assert await thread_cls._highwaters(object(), []) == {tp: 11}


async def test_the_true_start_replaces_a_wrong_earliest_answer(monkeypatch: Any) -> None:
    thread_cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    first, second = TP("t", 0), TP("t", 1)
    monkeypatch.setattr(thread_cls, "_highwaters", thread_cls._highwaters)
    monkeypatch.setattr(thread_cls, "earliest_offsets", thread_cls.earliest_offsets)
    monkeypatch.setattr(faust_compat, "_installed", {})
    asked: list[list[tuple[str, int]]] = []

    def starts(tps: list[tuple[str, int]], timeout_s: float) -> list[int]:
        asked.append(tps)
        return [0 for _ in tps]  # the log holds offset 0, whatever ListOffsets named

    faust_compat.install_recovery_offsets(lambda tps, timeout_s: [], starts)
    assert await thread_cls.earliest_offsets(object(), first, second) == {first: 0, second: 0}
    assert asked == [[("t", 0), ("t", 1)]]
    assert await thread_cls.earliest_offsets(object()) == {}


def test_only_the_embedded_broker_patches_faust_recovery(monkeypatch: Any) -> None:
    thread_cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    listed_highwaters, listed_earliest = thread_cls._highwaters, thread_cls.earliest_offsets
    monkeypatch.setattr(thread_cls, "_highwaters", listed_highwaters)
    monkeypatch.setattr(thread_cls, "earliest_offsets", listed_earliest)
    monkeypatch.setattr(faust_compat, "_installed", {})
    broker_of("kafka", "127.0.0.1:1").patch_faust_recovery()
    assert thread_cls._highwaters is listed_highwaters and thread_cls.earliest_offsets is listed_earliest
    broker_of("embedded", "127.0.0.1:1").patch_faust_recovery()
    assert thread_cls._highwaters is not listed_highwaters
    assert thread_cls.earliest_offsets is not listed_earliest
