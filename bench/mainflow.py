"""Main flow bench: the Spark → hub events/s of the main job beside the Cosmos endpoint's ceiling
for the same documents, in one run.

Flow: `hubstream run` in this process (embedded stack, 2 workers, Spark ingest under an exact
batch, the `hub-feed` subscription saving into the hub, the MySQL mirror, actors draining); its
figure is the events produced divided by the time from Spark's first task to the hub's last
consumed event (`spark_to_hub_events_per_s` of the run's summary).

Ceiling: the same number of event documents and index documents (the hub writes about two per
event, in batches of 100 per partition) created through the same client and batching code, with
as many batches in flight as the two workers' write gates allow, into a fresh database that is
deleted afterwards. Its events/s is half the documents/s.

With `--cpu`, the CPU time of every process is sampled through the run and printed by role
(workers, endpoint, Spark, broker, ...) for the flow's window (Spark's first task to the hub's
last consumed event) and for the ceiling's: where the flow's core-seconds go. Then the budget of
the target ratio: at 0.4 the flow must end within the ceiling's time / 0.4, so the two cores give
it that many core-seconds; less what it runs beside the save (Spark, the broker, the mirror) and
the ceiling's own creates, what is left is what the workers may spend on everything else.

    .venv/bin/python -m bench.mainflow [--events 200000] [--recipients 1000] [--cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
import uuid
from collections import defaultdict
from typing import Any

import orjson
from rich.console import Console

from app.cosmos import open_cosmos
from app.dataavailable import DataAvailable
from app.flow.mainjob import MainJobOptions, run_main_job
from app.hub.cosmos_io import HubContainers
from app.hub.documents import event_doc, index_doc
from app.hub.model import StoredEvent, content_hash
from app.settings import Settings, get_settings
from bench.cleanup import drop_bench_database
from bench.cpu_share import CpuSampler
from spark_ingest.sample import SampleSpec, sample_rows

WORKERS = 2
TARGET_RATIO = 0.4


def _documents(events: int, recipients: int) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The hub's documents for the sample's events: per (container role, partition), in order."""
    docs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    drawers: dict[tuple[str, str], str] = {}
    seqs: dict[str, int] = defaultdict(int)
    for row in sample_rows(SampleSpec(events, recipients, 0)):
        event = DataAvailable(str(uuid.uuid4()), **row)
        drawer = drawers.setdefault((event.recipient, event.origin), str(uuid.uuid4()))
        seqs[event.recipient] += 1
        seq = seqs[event.recipient]
        docs[("events", drawer)].append(event_doc(StoredEvent(event, seq, drawer)))
        docs[("ids", event.recipient)].append(
            index_doc(event.id, event.recipient, content_hash(event), seq, "bench")
        )
    return docs


async def ceiling(
    settings: Settings, events: int, recipients: int
) -> tuple[dict[str, float], tuple[float, float]]:
    """The ceiling's figures, and the time.monotonic() window of its creates."""
    docs = _documents(events, recipients)
    store = await open_cosmos(settings, f"bench-ceiling-{uuid.uuid4().hex[:8]}")
    try:
        events_c, ids_c = await asyncio.gather(
            store.container("events", "/pk"), store.container("ids", "/pk")
        )
        io = HubContainers(
            [events_c], events_c, events_c, events_c, ids_c,
            write_gate=asyncio.Semaphore(WORKERS * settings.hub_save_concurrency),
        )  # fmt: skip
        containers = {"events": events_c, "ids": ids_c}
        started = time.monotonic()
        await asyncio.gather(
            *(io.bulk_create(containers[role], pk, batch) for (role, pk), batch in docs.items())
        )
        ended = time.monotonic()
        seconds = ended - started
        count = sum(len(batch) for batch in docs.values())
        return {"documents": count, "seconds": seconds, "events_per_s": events / seconds}, (started, ended)
    finally:
        await drop_bench_database(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--cpu", action="store_true", help="CPU time by role over the flow and the ceiling")
    args = parser.parse_args()
    settings = get_settings()
    console = Console(stderr=True)
    with CpuSampler() if args.cpu else contextlib.nullcontext() as sampler:
        job_started = time.monotonic()
        counts = run_main_job(
            settings, MainJobOptions(events=args.events, recipients=args.recipients, invalid=0), console
        )
        flow = float(counts["spark_to_hub_events_per_s"])
        top, creates = asyncio.run(ceiling(settings, counts["produced"], args.recipients))
    if sampler is not None:
        spark, hub = counts["stage_timeline"]["spark"], counts["stage_timeline"]["hub"]
        windows = {"flow": (job_started + spark[0], job_started + hub[1]), "ceiling": creates}
        _print_cpu(sampler, windows, counts["produced"])
    print(f"flow      Spark → hub {counts['produced']:,} events: {flow:,.0f} events/s")
    print(f"          job {counts['seconds']:,.0f} s, retries {counts['retries']}")
    print(f"          stage seconds {counts['stage_seconds']}")
    print(
        f"ceiling   {top['documents']:,} documents created in bulk in {top['seconds']:.1f} s:"
        f" {top['events_per_s']:,.0f} events/s"
    )
    print(f"ratio     flow / ceiling = {flow / top['events_per_s']:.2f} (target >= {TARGET_RATIO})")
    print(orjson.dumps({"flow": counts, "ceiling": top}).decode())


def _print_cpu(sampler: CpuSampler, windows: dict[str, tuple[float, float]], events: int) -> None:
    spent = {name: sampler.core_seconds(*window) for name, window in windows.items()}
    roles = sorted(
        {role for by_role in spent.values() for role in by_role}, key=lambda r: -spent["flow"].get(r, 0)
    )
    cores = os.cpu_count() or 1
    header = "".join(f"{name:>16}" for name in windows)
    print(f"cpu       core-seconds by role{header}")
    for role in roles:
        print(f"          {role:<26}" + "".join(f"{spent[name].get(role, 0.0):>16.1f}" for name in windows))
    print(f"          {'all':<26}" + "".join(f"{sum(spent[name].values()):>16.1f}" for name in windows))
    walls = "".join(f"{(end - start) * cores:>16.1f}" for start, end in windows.values())
    print(f"          {f'available ({cores} cores)':<26}{walls}")
    start, end = windows["ceiling"]
    _print_budget(spent["flow"], spent["ceiling"], (end - start) * cores, events)


# What the flow runs beside the hub's saves, which no save path can take off the cores.
BESIDE_THE_SAVE = ("Spark JVM", "Spark Python workers", "broker", "MySQL mirror pipeline", "MariaDB")


def _print_budget(
    flow: dict[str, float], ceiling: dict[str, float], ceiling_cores_s: float, events: int
) -> None:
    """At the target ratio the flow ends within the ceiling's time / TARGET_RATIO: the cores give it
    that many core-seconds. Less what the flow runs beside the save and the ceiling's own creates,
    the rest is what the workers may spend consuming, delivering, on the save's bookkeeping and on
    batch acks; printed against what the workers and the endpoint spent beyond the creates."""
    budget = ceiling_cores_s / TARGET_RATIO
    creates = sum(ceiling.values())
    beside = sum(flow.get(role, 0.0) for role in BESIDE_THE_SAVE)
    left = budget - beside - creates
    spent = flow.get("workers", 0.0) + flow.get("Cosmos endpoint", 0.0) - creates
    print(
        f"budget    at {TARGET_RATIO} the cores give the flow {budget:.1f} core-seconds: Spark, the broker"
        f" and the mirror took {beside:.1f}, the ceiling's creates {creates:.1f}"
    )
    print(
        f"          left for consuming, delivering, save bookkeeping and acks: {left:.1f}"
        f" ({left / events * 1e6:.1f} µs an event); the workers and the endpoint spent {spent:.1f}"
        f" ({spent / events * 1e6:.1f} µs an event) beyond the creates"
    )


if __name__ == "__main__":
    main()
