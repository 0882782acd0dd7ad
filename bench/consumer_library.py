"""Consumer library bench, two figures, each against its plain baseline on the same records in the
same run (medians of --runs):

1. throughput with a no-op handler: `KeyedConsumer` vs a raw confluent-kafka poll loop in a
   consumer group (consume in batches of 1,000, commit at the end), on the same 8-partition topic
   of --records records over 10,000 keys. Timed from the first record handed over to the last
   (the group join, seconds on the embedded broker, is left out of both).
2. a handler that awaits 10 ms, --slow-keys keys x 5 records over 4 partitions: `KeyedConsumer`
   (one record per key at a time, --concurrency at once) vs partition-sequential processing of
   the same handler (one record at a time per partition, the 4 partitions concurrently: what a
   plain consumer per partition does).

Ends with a JSON line of the medians: `library_msg_s`, `raw_msg_s` and `ratio_raw` (library to raw,
target >= 0.35) for the first figure; `slow_library_msg_s`, `slow_sequential_msg_s` and
`speedup` for the second; `each_run_msg_s` holds every run's rates.

    .venv/bin/python bench/consumer_library.py [--records 100000] [--slow-keys 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import orjson
from confluent_kafka import Consumer, Producer

from app.consumer import ConsumerSettings, KeyedConsumer, Message
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.settings import get_settings

SLOW_S = 0.010


def fill(bootstrap: str, topic: str, partitions: int, records: int, keys: int) -> None:
    KafkaAdmin(bootstrap, get_settings().kafka_replication_factor).ensure([TopicSpec(topic, partitions)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"k{i % keys}".encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0


def raw_poll_loop(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.interval.ms": 10000,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    first = 0.0
    while seen < records:
        batch = consumer.consume(1000, 0.5)
        if batch and not first:
            first = time.perf_counter()
        seen += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - first
    consumer.commit(asynchronous=False)
    consumer.close()
    return elapsed


async def library(bootstrap: str, topic: str, records: int, slow_s: float, concurrency: int) -> float:
    """`slow_s`: how long the handler awaits (0: a no-op handler, which only notes when the first
    record came, as the timing of both figures needs)."""
    marks: list[float] = []

    async def timed(message: Message) -> None:
        if not marks:
            marks.append(time.perf_counter())
        if slow_s:
            await asyncio.sleep(slow_s)

    settings = ConsumerSettings(
        name=f"bench-{uuid.uuid4().hex[:8]}",
        topic=topic,
        bootstrap=bootstrap,
        concurrency=concurrency,
        buffered=max(10_000, concurrency * 4),
    )
    consumer = KeyedConsumer(settings, timed)
    task = asyncio.create_task(consumer.run())
    while consumer.stats.delivered < records:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - marks[0]
    consumer.stop()
    await task
    return elapsed


async def partition_sequential(bootstrap: str, topic: str, records: int) -> float:
    """Read every record, then run the 10 ms handler one record at a time per partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"seq-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.interval.ms": 10000,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    by_partition: dict[int, list[bytes | None]] = {}
    seen = 0
    while seen < records:
        for m in consumer.consume(1000, 0.5):
            if m.error() is None:
                by_partition.setdefault(m.partition(), []).append(m.value())
                seen += 1
    consumer.close()

    async def run(values: list[bytes | None]) -> None:
        for _ in values:
            await asyncio.sleep(SLOW_S)

    start = time.perf_counter()
    await asyncio.gather(*(run(v) for v in by_partition.values()))
    return time.perf_counter() - start


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--slow-keys", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    bootstrap = get_settings().bootstrap

    raw_s, lib_s, seq_s, keyed_s = [], [], [], []
    for run in range(args.runs):
        topic = f"bench-lib-{uuid.uuid4().hex[:8]}"
        fill(bootstrap, topic, 8, args.records, 10_000)
        raw_s.append(await asyncio.to_thread(raw_poll_loop, bootstrap, topic, args.records))
        lib_s.append(await library(bootstrap, topic, args.records, 0.0, 64))
        slow_topic = f"bench-slow-{uuid.uuid4().hex[:8]}"
        slow_records = args.slow_keys * 5
        fill(bootstrap, slow_topic, 4, slow_records, args.slow_keys)
        seq_s.append(await partition_sequential(bootstrap, slow_topic, slow_records))
        keyed_s.append(await library(bootstrap, slow_topic, slow_records, SLOW_S, args.concurrency))
        print(
            f"run {run + 1}: no-op {args.records / lib_s[-1]:,.0f}/s vs raw "
            f"{args.records / raw_s[-1]:,.0f}/s; "
            f"10 ms handler {slow_records / keyed_s[-1]:,.0f}/s vs partition-sequential "
            f"{slow_records / seq_s[-1]:,.0f}/s"
        )
    raw, lib = statistics.median(raw_s), statistics.median(lib_s)
    seq, keyed = statistics.median(seq_s), statistics.median(keyed_s)
    slow_records = args.slow_keys * 5
    print(f"\nmedians of {args.runs} runs")
    print(
        f"no-op handler, {args.records:,} records, 8 partitions: "
        f"library {args.records / lib:,.0f} records/s, "
        f"raw poll loop {args.records / raw:,.0f} records/s, ratio {raw / lib:.2f} (target >= 0.35)"
    )
    print(
        f"10 ms handler, {args.slow_keys:,} keys x 5 over 4 partitions: "
        f"library {slow_records / keyed:,.0f}/s "
        f"({keyed:.2f} s), partition-sequential {slow_records / seq:,.0f}/s ({seq:.2f} s), "
        f"speed-up {seq / keyed:.1f}x (target >= 50x)"
    )
    print(
        orjson.dumps(
            {
                "records": args.records,
                "runs": args.runs,
                "library_msg_s": round(args.records / lib),
                "raw_msg_s": round(args.records / raw),
                "ratio_raw": round(raw / lib, 3),
                "slow_keys": args.slow_keys,
                "slow_library_msg_s": round(slow_records / keyed),
                "slow_sequential_msg_s": round(slow_records / seq),
                "speedup": round(seq / keyed, 1),
                "each_run_msg_s": {
                    "library": [round(args.records / e) for e in lib_s],
                    "raw": [round(args.records / e) for e in raw_s],
                    "slow_library": [round(slow_records / e) for e in keyed_s],
                    "slow_sequential": [round(slow_records / e) for e in seq_s],
                },
            }
        ).decode()
    )


if __name__ == "__main__":
    asyncio.run(main())
