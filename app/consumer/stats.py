"""A copy's counters, and the handler wrapper that keeps the per-call ones."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from app.consumer.model import Handler, Message
from app.ordered.engine import Outcome

__all__ = ["ConsumerStats", "Counted", "StatsCollector"]


@dataclass
class ConsumerStats:
    delivered: int = 0
    filtered: int = 0
    retrying: int = 0
    sidelined: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    attempts: int = 0  # handler calls
    failures: int = 0  # handler calls that raised
    write_failures: int = 0  # retry/DLQ/state writes that failed and were tried again
    in_flight: int = 0
    max_in_flight: int = 0
    abandoned: int = 0  # handlers still running when their partition was revoked
    forgotten: int = 0  # key states dropped once settled behind the commits

    def count(self, outcome: Outcome) -> None:
        if outcome is Outcome.DELIVERED:
            self.delivered += 1
        else:
            setattr(self, outcome.value, getattr(self, outcome.value) + 1)


class Counted:
    """The handler as the copy calls it: counts attempts, failures and calls in flight. The copy's
    fast path calls `handler` itself between `enter` and `leave` (one coroutine frame less)."""

    def __init__(self, handler: Handler, stats: ConsumerStats) -> None:
        self.handler = handler
        self.stats = stats

    def enter(self) -> None:
        stats = self.stats
        stats.attempts += 1
        stats.in_flight += 1
        if stats.in_flight > stats.max_in_flight:
            stats.max_in_flight = stats.in_flight

    def leave(self, failed: bool) -> None:
        self.stats.in_flight -= 1
        if failed:
            self.stats.failures += 1

    async def __call__(self, message: Message) -> None:
        self.enter()
        failed = True
        try:
            await self.handler(message)
            failed = False
        finally:
            self.leave(failed)


GAUGES = frozenset({"in_flight", "max_in_flight"})


class StatsCollector:
    """A copy's counters as Prometheus families (`hubstream_consumer_<counter>_total`, and the
    in-flight gauges), labelled by consumer name, read at each scrape."""

    def __init__(self, consumer: str, stats: ConsumerStats) -> None:
        self.consumer = consumer
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        for field in fields(self.stats):
            value = float(getattr(self.stats, field.name))
            name = f"hubstream_consumer_{field.name}"
            family: GaugeMetricFamily | CounterMetricFamily
            if field.name in GAUGES:
                family = GaugeMetricFamily(name, f"This copy's {field.name}", labels=["consumer"])
            else:
                family = CounterMetricFamily(
                    name, f"Messages or calls of this copy: {field.name}", labels=["consumer"]
                )
            family.add_metric([self.consumer], value)
            yield family
