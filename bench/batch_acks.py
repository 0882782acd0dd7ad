"""Item acks per second into exact batches, on one worker: through the Kafka ack topic and through
HTTP (1,000 ids a request), beside a plain in-process baseline on the same ids.

Kafka: the acks of a closed batch are produced (1,000 ids a record) while the worker is stopped;
the clock runs from the restarted worker serving its partitions until the batch is complete, so
the figure is the worker's consume-and-track rate, not the producer's.
Baseline: the same id strings split and applied to one bytearray per group in a Python loop (no
Kafka, no RocksDB, no changelog): the floor cost of parsing and flipping bits in Python, so the
ratio is what transport, durability and Faust cost on top of it. (A plain Faust agent without
tracking would isolate Faust's share, but would not show the cost of the tracking itself.)

    .venv/bin/python bench/batch_acks.py [--items 1000000] [--http-items 200000] [--profile]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from app.batch.acks import AckProducer
from app.batch.bitfield import filled
from app.batch.client import BatchClient, calls
from app.settings import get_settings

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 4
RUNNER = """
import sys
from app.settings import Settings
from agents import build_worker
settings = Settings()
app = build_worker(settings, ["batches"]).app
sys.argv = [sys.argv[0], "worker", "-l", "warn", "--web-port", str(settings.web_port)]
app.main()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker:
    def __init__(self, env: dict[str, str], home: Path, profile: bool) -> None:
        self.url = f"http://127.0.0.1:{env['WEB_PORT']}"
        cmd = [sys.executable, "-c", RUNNER]
        if profile:
            cmd = [sys.executable, "-m", "pyinstrument", "-o", str(home / "profile.txt"), "-c", RUNNER]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=(home / "worker.log").open("ab"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/api/v1/batch/status", timeout=2) as response:
                    if len(orjson.loads(response.read())["partitionsServed"]) == PARTITIONS:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"worker died; see {home / 'worker.log'}")
            time.sleep(0.05)
        raise SystemExit("worker did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT if "pyinstrument" in str(self.proc.args) else signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def worker_env(prefix: str) -> tuple[dict[str, str], Path]:
    """A batch worker's environment with topics and app id of its own, and its home."""
    settings = get_settings()
    suffix = uuid.uuid4().hex[:8]
    home = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    env = dict(
        os.environ,
        HUBSTREAM_APP_ID=f"{prefix}-{suffix}",
        KAFKA_BOOTSTRAP=settings.bootstrap,
        KAFKA_BROKER_KIND=settings.broker_kind,
        TABLE_PARTITIONS=str(PARTITIONS),
        BATCH_ACKS_TOPIC=f"{prefix}-acks-{suffix}",
        BATCH_COMPLETIONS_TOPIC=f"{prefix}-done-{suffix}",
        BROKER_SESSION_TIMEOUT_S="3",
        BROKER_REBALANCE_TIMEOUT_S="3",
        HUBSTREAM_HOME=str(home),
        WEB_PORT=str(free_port()),
    )
    return env, home


def baseline_acks_per_s(item_ids: list[str]) -> float:
    """Plain Python: split each id, clear its bit in a bytearray per group."""
    sizes: dict[str, int] = {}
    for item_id in item_ids:
        group = item_id.split(":")[1]
        sizes[group] = sizes.get(group, 0) + 1
    groups = {group: filled(size) for group, size in sizes.items()}
    start = time.perf_counter()
    for item_id in item_ids:
        _, group, index = item_id.split(":")
        i = int(index)
        groups[group][i >> 3] &= ~(1 << (i & 7)) & 0xFF
    elapsed = time.perf_counter() - start
    assert not any(any(g) for g in groups.values())
    return len(item_ids) / elapsed


def kafka_acks_per_s(env: dict[str, str], home: Path, items: int, profile: bool) -> tuple[float, list[str]]:
    worker = Worker(env, home, profile=False)
    client = BatchClient(worker.url)
    batch_id = client.create_exact()
    item_ids = client.add_item_ids(batch_id, items)
    client.close_exact(batch_id)
    worker.stop()
    producer = AckProducer(env["KAFKA_BOOTSTRAP"], env["BATCH_ACKS_TOPIC"], PARTITIONS)
    for offset in range(0, items, 1000):
        producer.send(item_ids[offset : offset + 1000])
    assert producer.flush(60) == 0
    worker = Worker(env, home, profile=profile)
    poll = BatchClient(worker.url, timeout_s=120)
    start = time.perf_counter()
    try:
        while (first := poll.get_exact(batch_id))["pendingItems"] == items:
            time.sleep(0.01)
        first_at, first_pending = time.perf_counter(), first["pendingItems"]
        while not poll.get_exact(batch_id)["isComplete"]:
            time.sleep(0.02)
        end = time.perf_counter()
    finally:
        worker.stop()
    print(
        f"Kafka: {end - start:.1f} s from serving to complete, of which {first_at - start:.1f} s "
        f"until the first ack was applied; steady rate {first_pending / (end - first_at):,.0f} acks/s"
    )
    elapsed = end - start
    return items / elapsed, item_ids


def http_acks_per_s(env: dict[str, str], home: Path, items: int, threads: int) -> float:
    worker = Worker(env, home, profile=False)
    try:
        client = BatchClient(worker.url)
        batch_id = client.create_exact()
        item_ids = client.add_item_ids(batch_id, items)
        client.close_exact(batch_id)
        chunks = [item_ids[i : i + 1000] for i in range(0, items, 1000)]
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda chunk: client.send(calls.ack(chunk)), chunks))
        elapsed = time.perf_counter() - start
        assert client.get_exact(batch_id)["isComplete"]
        return items / elapsed
    finally:
        worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--http-items", type=int, default=200_000)
    parser.add_argument("--http-threads", type=int, default=4)
    parser.add_argument(
        "--profile", action="store_true", help="Run the Kafka phase's worker under pyinstrument."
    )
    args = parser.parse_args()
    env, home = worker_env("bench-acks")
    kafka_rate, item_ids = kafka_acks_per_s(env, home, args.items, args.profile)
    http_rate = http_acks_per_s(env, home, args.http_items, args.http_threads)
    base_rate = baseline_acks_per_s(item_ids)
    print(
        f"{args.items:,} item acks through Kafka (1,000 ids a record), one worker: "
        f"{kafka_rate:>12,.0f} acks/s"
    )
    print(
        f"{args.http_items:,} item acks through HTTP (1,000 ids a request, {args.http_threads} clients): "
        f"{http_rate:>12,.0f} acks/s"
    )
    print(f"baseline, plain Python bytearray in-process, same ids:        {base_rate:>12,.0f} acks/s")
    print(
        f"ratio baseline/Kafka {base_rate / kafka_rate:.1f}x, baseline/HTTP {base_rate / http_rate:.1f}x; "
        f"target >= 100,000 acks/s through Kafka: {'met' if kafka_rate >= 100_000 else 'NOT met'}"
    )
    if args.profile:
        print(f"profile of the Kafka phase: {home / 'profile.txt'}")
    print(
        orjson.dumps(
            {
                "bench": "batch_acks",
                "kafka_acks_per_s": round(kafka_rate),
                "http_acks_per_s": round(http_rate),
                "baseline_acks_per_s": round(base_rate),
                "items_kafka": args.items,
                "items_http": args.http_items,
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
