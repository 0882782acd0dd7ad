"""The consumer library's per-record Python cost, without a broker: `KeyedConsumer`'s record path
from a fetched batch to the committed offset, on one event loop.

Records are real `confluent_kafka.Message` objects built in memory (the accessors the adapter calls
are the C ones it calls on the broker), --records of them over --partitions partitions and --keys
keys (key k{i % keys}, its partition (i % keys) % partitions), in batches of 1,000 as `consume()`
hands them over (a run of each partition's next records). Each batch goes to
`KeyedConsumer._admit_batch` (what the poll thread schedules on the loop) while fewer than
`buffered` records wait, as the poll loop reads ahead; the copy's workers run a no-op handler
through the engine (in-memory key states and retry/DLQ queues: `app.ordered.memory`) and finish
the offsets, and every --commit-every batches the commit to send is computed (`_to_commit`, with
its finished-offsets metadata), as the poll thread asks every commit_interval_s. The clock stops
when every record is finished and the last commit is computed; the run checks that it covers
every partition to its end.

Baseline: a loop over the same batches that only counts them (`m.error() is None`), as the raw poll
loop of bench/consumer_library.py does after `consume()`. Its rate is far above a broker poll
loop's (no fetch, no decompression), so the ratio here is lower than the broker bench's: the
figure to watch is microseconds per record.

    .venv/bin/python bench/consumer_overhead.py [--records 200000] [--runs 3]
    .venv/bin/pyinstrument bench/consumer_overhead.py --runs 1
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from confluent_kafka import Message as KafkaMessage

from app.consumer import ConsumerSettings, KeyedConsumer, Message
from app.consumer.engine import LibraryEngine
from app.ordered.memory import MemoryQueues, MemoryStateLog

TOPIC = "orders"
BATCH = 1_000


def batches(records: int, partitions: int, keys: int) -> list[list[KafkaMessage]]:
    """Record i has key k{i % keys} in partition (i % keys) % partitions; a batch holds the next
    BATCH / partitions records of each partition, one run per partition, as a fetch returns them."""
    value = b"x" * 100
    logs: list[list[KafkaMessage]] = [[] for _ in range(partitions)]
    for i in range(records):
        k = i % keys
        log = logs[k % partitions]
        log.append(
            KafkaMessage(
                topic=TOPIC, partition=k % partitions, offset=len(log), key=f"k{k}".encode(), value=value
            )
        )
    run = max(1, BATCH // partitions)
    out: list[list[KafkaMessage]] = []
    for start in range(0, max(len(log) for log in logs), run):
        out.append([m for log in logs for m in log[start : start + run]])
    return out


def baseline(all_batches: list[list[KafkaMessage]]) -> float:
    start = time.process_time()
    seen = 0
    for batch in all_batches:
        seen += sum(1 for m in batch if m.error() is None)
    elapsed = time.process_time() - start
    assert seen == sum(len(b) for b in all_batches)
    return elapsed


def wire(consumer: KeyedConsumer, partitions: int) -> None:
    """What `run()` sets up before the poll thread starts, with in-memory ports, and the
    partitions assigned."""
    s = consumer.settings
    consumer._loop = asyncio.get_running_loop()
    consumer.partitions = partitions
    consumer._shares = None
    for _ in range(s.concurrency):
        consumer._spawn_worker()
    consumer._engine = LibraryEngine(s, consumer._handler, MemoryStateLog(), MemoryQueues())
    consumer._owned.update(range(partitions))


async def lane_ended(consumer: KeyedConsumer) -> None:
    consumer._lane_ended.clear()
    await consumer._lane_ended.wait()


async def library(all_batches: list[list[KafkaMessage]], partitions: int, commit_every: int) -> float:
    async def noop(message: Message) -> None:
        return None

    settings = ConsumerSettings(
        name="overhead", topic=TOPIC, bootstrap="-", concurrency=64, buffered=10_000
    )  # as bench/consumer_library.py's no-op run
    consumer = KeyedConsumer(settings, noop)
    wire(consumer, partitions)
    records = sum(len(b) for b in all_batches)
    start = time.process_time()
    for i, batch in enumerate(all_batches):
        # the poll thread waits while the buffer is full
        while consumer._buffered + consumer._posted - consumer._admitted >= settings.buffered:
            await lane_ended(consumer)
        consumer._posted += len(batch)
        consumer._admit_batch(batch)
        if i % commit_every == commit_every - 1:
            consumer._committed.update(await consumer._to_commit())
    while consumer._buffered or consumer._pull_open:
        await lane_ended(consumer)
    consumer._committed.update(await consumer._to_commit())
    elapsed = time.process_time() - start
    ends = {(TOPIC, p): 0 for p in range(partitions)}
    for batch in all_batches:
        for m in batch:
            ends[(TOPIC, m.partition())] = m.offset() + 1
    assert {tp: c[0] for tp, c in consumer._committed.items()} == ends, "not committed to the end"
    assert consumer.stats.delivered == records, consumer.stats
    for task in list(consumer._workers):
        task.cancel()
    await asyncio.gather(*consumer._workers, return_exceptions=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--commit-every", type=int, default=20, help="batches between commits")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    all_batches = batches(args.records, args.partitions, args.keys)
    base_s, lib_s = [], []
    for run in range(args.runs):
        base_s.append(baseline(all_batches))
        lib_s.append(asyncio.run(library(all_batches, args.partitions, args.commit_every)))
        print(
            f"run {run + 1}: library {args.records / lib_s[-1]:,.0f} records/s "
            f"({lib_s[-1] / args.records * 1e6:.2f} us/record), "
            f"counting loop {args.records / base_s[-1]:,.0f} records/s"
        )
    base, lib = statistics.median(base_s), statistics.median(lib_s)
    print(
        f"\nmedians of {args.runs} runs, {args.records:,} records, {args.partitions} partitions, "
        f"{args.keys:,} keys, no-op handler:\n"
        f"library {args.records / lib:,.0f} records/s ({lib / args.records * 1e6:.2f} us/record); "
        f"counting loop {args.records / base:,.0f} records/s ({base / args.records * 1e6:.3f} us/record); "
        f"ratio {base / lib:.3f}"
    )


if __name__ == "__main__":
    main()
