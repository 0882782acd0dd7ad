"""A library copy run with --metrics-port serves Prometheus metrics: its counters, labelled by the
consumer's name, and the process's series; nothing is served without it."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.settings import Settings
from tests.integration.consumer.helpers import fill, wait_until
from tests.integration.consumer.processes import Copies
from tests.support.consumer_handler import permanent
from tests.support.ports import free_port

KEYS, PER_KEY = 20, 10


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.asyncio
async def test_a_copy_serves_its_counters(kafka: Settings, unique: str, tmp_path: Path) -> None:
    copies = Copies(tmp_path, kafka.bootstrap, f"mx-{unique}", f"mx-{unique}")
    total = fill(kafka.bootstrap, copies.topic, 2, KEYS, PER_KEY)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    label = (("consumer", copies.name),)

    def settled() -> bool:
        try:
            samples = _scrape(url)
        except OSError:
            return False
        done = samples.get(("hubstream_consumer_delivered_total", label), 0)
        return done + samples.get(("hubstream_consumer_dead_lettered_total", label), 0) >= total

    try:
        copies.start("metered", "--concurrency", "8", "--metrics-port", str(port))
        await wait_until(settled, 120, "the copy's counters at its endpoint")
        samples = _scrape(url)
        delivered = samples[("hubstream_consumer_delivered_total", label)]
        dead = samples[("hubstream_consumer_dead_lettered_total", label)]
        assert delivered == len(set(copies.handled())) and delivered + dead == total
        assert dead == sum(
            PER_KEY - 1 for k in range(KEYS) if permanent(f"k{k}", 1)
        )  # k5's after its failure
        assert samples[("hubstream_consumer_failures_total", label)] > dead  # the transient ones too
        assert ("process_cpu_seconds_total", ()) in samples and any(
            name == "hubstream_build_info" for name, _ in samples
        )
        assert copies.stop("metered") == 0, copies.log_tail("metered")
        with pytest.raises(urllib.error.URLError):
            await asyncio.to_thread(urllib.request.urlopen, url, timeout=2)  # stopped with its copy
    finally:
        copies.stop_all()
