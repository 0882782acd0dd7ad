"""Composite-topic producer vs a raw confluent-kafka producer: same broker, same messages, one run.

Both send N messages of ~100 B for G groups to a 12-partition topic and flush; the raw
producer gets the partition the router would pick, precomputed, so the ratio measures
hubstream's per-message overhead (validation, hashing, routing, metadata refresh).
Usage: .venv/bin/python bench/composite_producer.py [--messages 300000] [--groups 1000]
"""

from __future__ import annotations

import argparse
import time
import uuid

import orjson
from confluent_kafka import Producer

from app.composite import group_hash
from app.composite.producer import CompositeProducer, producer_config
from app.composite.store import MetadataStore
from app.settings import get_settings
from app.stack import stack_up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    messages: int = args.messages
    settings = get_settings()
    stack_up(settings)
    store = MetadataStore.of(settings)
    suffix = uuid.uuid4().hex[:8]
    composite = store.create(f"bench-composite-{suffix}", 12)
    raw_topic = f"bench-composite-{suffix}.0"  # raw producer writes the same storage topic
    groups = [f"recipient-{i:05d}" for i in range(args.groups)]
    payloads = [orjson.dumps({"n": i, "pad": "x" * 80}) for i in range(args.messages)]
    keys = [groups[i % len(groups)] for i in range(args.messages)]

    def run_hubstream() -> float:
        producer = CompositeProducer(settings, composite.name, store=store)
        start = time.perf_counter()
        for key, payload in zip(keys, payloads, strict=True):
            producer.produce(key, payload)
        producer.flush()
        return messages / (time.perf_counter() - start)

    def run_raw() -> float:
        producer = Producer(producer_config(settings))
        storage = composite.storage_topics[0]
        partitions = [storage.route(group_hash(k)) for k in keys]  # precomputed: not timed
        encoded = [k.encode() for k in keys]
        start = time.perf_counter()
        for key, payload, partition in zip(encoded, payloads, partitions, strict=True):
            while True:
                try:
                    producer.produce(raw_topic, value=payload, key=key, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush(60)
        return messages / (time.perf_counter() - start)

    hub_rates, raw_rates = [], []
    for _ in range(args.rounds):  # interleaved so both see the same broker state
        raw_rates.append(run_raw())
        hub_rates.append(run_hubstream())
    hub, raw = max(hub_rates), max(raw_rates)
    print(
        f"messages per round      {args.messages:,} of ~100 B, {args.groups} groups, "
        f"{args.rounds} rounds (best)"
    )
    print(f"raw confluent-kafka     {raw:12,.0f} msg/s")
    print(f"hubstream composite     {hub:12,.0f} msg/s")
    print(f"ratio hubstream/raw     {hub / raw:12.2f}   (target >= 0.9)")
    print(
        orjson.dumps(
            {
                "bench": "composite_producer",
                "raw_msgs_per_s": round(raw),
                "hubstream_msgs_per_s": round(hub),
                "ratio": round(hub / raw, 3),
            }
        ).decode()
    )
    store.delete(composite.name)
    store.close()


if __name__ == "__main__":
    main()
