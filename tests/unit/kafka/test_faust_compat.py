"""The one Faust internal the project replaces (app.kafka.faust_compat): its highwater lookup.
Pinned here so a Faust upgrade that renames or reshapes it fails this test, not a worker's
recovery on the embedded broker."""

from __future__ import annotations

import inspect
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from app.kafka import faust_compat


def test_the_replaced_method_is_still_an_async_lookup_of_partitions() -> None:
    method = faust_aiokafka.AIOKafkaConsumerThread._highwaters
    assert inspect.iscoroutinefunction(method)
    assert list(inspect.signature(method).parameters) == ["self", "partitions"]


async def test_the_true_end_wins_over_an_under_reported_highwater(monkeypatch: Any) -> None:
    thread_cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    tp = TP("t", 0)

    async def listed(self: Any, partitions: list[Any]) -> dict[Any, int]:
        return {tp: 11}  # the embedded broker: the base offset of the last batch + 1

    monkeypatch.setattr(thread_cls, "_highwaters", listed)
    monkeypatch.setattr(faust_compat, "_installed", {})
    monkeypatch.setattr(faust_compat, "true_end_offsets", lambda bootstrap, tps, timeout_s: [15 for _ in tps])
    faust_compat.install_true_highwaters("127.0.0.1:1")
    assert thread_cls._highwaters is not listed
    assert await thread_cls._highwaters(object(), [tp]) == {tp: 15}
    assert await thread_cls._highwaters(object(), []) == {tp: 11}
