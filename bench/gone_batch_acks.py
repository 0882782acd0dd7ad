"""How long acks of a batch that is gone hold the other acks of their partition, on one worker:
N ack records naming the item of a closed and expired batch, then one record acking batch B's
only item, all in one partition of the ack topic; the clock runs from the first record sent until
B reads complete. Baseline, in the same run and partition: N records acking an item of a live
batch instead (what the same number of valid records costs), then B's ack.

    .venv/bin/python -m bench.gone_batch_acks [--records 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

import orjson

from app.batch.acks import AckProducer
from app.batch.client import BatchClient
from bench.batch_acks import PARTITIONS, Worker, worker_env


def same_partition_batches(client: BatchClient, count: int) -> list[int]:
    """`count` new batches of one partition (creates go round robin over the partitions)."""
    made = [client.create_exact() for _ in range(PARTITIONS * count)]
    ours = [b for b in made if b % PARTITIONS == made[0] % PARTITIONS]
    return ours[:count]


def one_run(client: BatchClient, producer: AckProducer, records: int, gone: bool) -> float:
    held, b = same_partition_batches(client, 2)
    [held_item] = client.add_item_ids(held, 1)
    [b_item] = client.add_item_ids(b, 1)
    if gone:
        client.close_exact(held)
        client.delete_expired(closed=True, since=datetime.now(UTC) + timedelta(minutes=1))
    client.close_exact(b)
    start = time.perf_counter()
    for _ in range(records):
        producer.send([held_item])
    producer.send([b_item])
    assert producer.flush(30) == 0
    while not client.get_exact(b)["isComplete"]:
        time.sleep(0.005)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env, home = worker_env("bench-gone")
    worker = Worker(env, home, profile=False)
    gone_s: list[float] = []
    live_s: list[float] = []
    try:
        client = BatchClient(worker.url, timeout_s=60)
        producer = AckProducer(env["KAFKA_BOOTSTRAP"], env["BATCH_ACKS_TOPIC"], PARTITIONS)
        one_run(client, producer, 1, gone=False)  # warm-up: topics, fetchers
        # The baseline first: a gone batch's records that were re-queued would hold a later run
        for _ in range(args.runs):
            live_s.append(one_run(client, producer, args.records, gone=False))
        for _ in range(args.runs):
            gone_s.append(one_run(client, producer, args.records, gone=True))
    finally:
        worker.stop()
    gone, live = statistics.median(gone_s), statistics.median(live_s)
    extra_ms = max(0.0, gone - live) / args.records * 1000
    print(
        f"{args.records} acks of a gone batch, then B's ack: B complete after {gone * 1000:8.1f} ms (median)"
    )
    print(
        f"{args.records} acks of a live batch, then B's ack: B complete after {live * 1000:8.1f} ms (median)"
    )
    print(
        f"ratio gone/live {gone / live:.2f}; each gone record holds the partition {extra_ms:.1f} ms "
        f"more than a valid one (target < 100 ms: {'met' if extra_ms < 100 else 'NOT met'})"
    )
    print(
        orjson.dumps(
            {
                "bench": "gone_batch_acks",
                "records": args.records,
                "gone_ms": [round(s * 1000, 1) for s in gone_s],
                "live_ms": [round(s * 1000, 1) for s in live_s],
                "ratio_gone_live": round(gone / live, 3),
                "extra_ms_per_gone_record": round(extra_ms, 2),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
