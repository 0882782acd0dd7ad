"""Bytes on disk per tracked item for a 10,000,000-item exact batch.

hubstream: the batch table's own layout (ExactRules writing group bitfields of BATCH_GROUP_SIZE_ITEMS
items) into a RocksDB partition opened with Faust's RocksDB options, compacted, then measured with
the size of its directory. Kafka is not involved: the changelog is the broker's business.
Baseline, in the same run: Carlyle's layout (batch_item_groups, one BIGINT UNSIGNED row per 64 items,
its V1 schema) in the local MariaDB, OPTIMIZEd, measured as DATA_LENGTH + INDEX_LENGTH.

Measured twice: right after adding the items (every bit set) and after acking a random half of
them (the incompressible middle of a batch's life).

    .venv/bin/python bench/batch_disk.py [--items 10000000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pymysql
from faust.stores.rocksdb import RocksDBOptions

from app.batch.exact import ExactRules
from app.batch.ids import GroupAcks
from app.settings import get_settings


class RocksStore:
    """The BatchStore port over a bare RocksDB partition (what PartitionStore does minus the changelog)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.db.get(key)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, bytes(value))

    def delete(self, key: bytes) -> None:
        self.db.delete(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self.db.iter()
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            yield it.key(), it.value()
            it.next()


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def compacted_size(path: Path) -> int:
    db = RocksDBOptions().open(path)
    db.compact_range(None, None)
    db.flush()
    db.close()
    return sum(f.stat().st_size for f in path.glob("*.sst"))


def hubstream_sizes(items: int, group_size: int, rng: random.Random) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="batch-disk-"))
    path = root / "partition-0"
    try:
        rules = ExactRules(group_size, items)
        db = RocksDBOptions().open(path)
        store = RocksStore(db)
        batch = rules.create(store, 0, 8, None, 0)
        groups = rules.add_items(store, batch.batch_id, items, 1, lambda: str(uuid.uuid4()))
        rules.close(store, batch.batch_id, 2)
        db.close()
        full = compacted_size(path)
        all_dir = dir_bytes(path)
        db = RocksDBOptions().open(path)
        store = RocksStore(db)
        acks = [
            GroupAcks(batch.batch_id, g.id, tuple(rng.sample(range(g.upto), g.upto // 2))) for g in groups
        ]
        for start in range(0, len(acks), 16):
            rules.ack(store, acks[start : start + 16], 3)
        db.close()
        half = compacted_size(path)
        return {
            "full_sst_bytes": full,
            "full_dir_bytes": all_dir,
            "half_sst_bytes": half,
            "half_dir_bytes": dir_bytes(path),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


CARLYLE_SCHEMA = """
CREATE TABLE batch_item_groups (
  id         NVARCHAR(255)   NOT NULL,
  batch_id   BIGINT          NOT NULL,
  items      BIGINT UNSIGNED NOT NULL,
  size       BIGINT          NOT NULL,
  version    BIGINT          NOT NULL DEFAULT 0,
  created_at BIGINT          NOT NULL,
  updated_at BIGINT          NOT NULL,
  PRIMARY KEY (id)
)"""


def carlyle_sizes(items: int, rng: random.Random) -> dict[str, float]:
    target = get_settings().mysql
    database = f"bench_batch_{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(**target.connect_args(database="", autocommit=True))
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {database}")
            cur.execute(f"USE {database}")
            cur.execute(CARLYLE_SCHEMA)
            cur.execute("CREATE INDEX batch_items_batch_id_idx ON batch_item_groups (batch_id)")
            rows, now = [], int(time.time() * 1000)
            for start in range(0, items, 64):
                size = min(64, items - start)
                rows.append((str(uuid.uuid4()), 1, (1 << size) - 1, size, 0, now, now))
            for start in range(0, len(rows), 5000):
                cur.executemany(
                    "INSERT INTO batch_item_groups VALUES (%s,%s,%s,%s,%s,%s,%s)", rows[start : start + 5000]
                )
            full = table_bytes(cur, database)
            cur.execute(
                "UPDATE batch_item_groups SET items = items & %s, version = version + 1",
                (rng.getrandbits(64),),
            )
            half = table_bytes(cur, database)
            return {"full_bytes": full, "half_bytes": half, "rows": len(rows)}
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.close()


def table_bytes(cur: Any, database: str) -> int:
    cur.execute("OPTIMIZE TABLE batch_item_groups")
    cur.fetchall()
    cur.execute("ANALYZE TABLE batch_item_groups")
    cur.fetchall()
    cur.execute(
        "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'batch_item_groups'",
        (database,),
    )
    return int(cur.fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=10_000_000)
    parser.add_argument("--group-size", type=int, default=get_settings().batch_group_size_items)
    args = parser.parse_args()
    rng = random.Random(7)
    t0 = time.perf_counter()
    ours = hubstream_sizes(args.items, args.group_size, rng)
    t1 = time.perf_counter()
    carlyle = carlyle_sizes(args.items, rng)
    t2 = time.perf_counter()

    items: int = args.items

    def bits(n: float) -> float:
        return n * 8 / items

    print(
        f"{args.items:,} items, group size {args.group_size} "
        f"({t1 - t0:.1f} s hubstream, {t2 - t1:.1f} s Carlyle)"
    )
    print(f"{'state':<22}{'hubstream RocksDB':>22}{'Carlyle MariaDB':>22}{'ratio':>8}")
    for label, mine, theirs in [
        ("all pending", ours["full_sst_bytes"], carlyle["full_bytes"]),
        ("random half acked", ours["half_sst_bytes"], carlyle["half_bytes"]),
    ]:
        print(
            f"{label:<22}{bits(mine):>14.3f} bits/item{bits(theirs):>14.3f} bits/item"
            f"{theirs / max(mine, 1):>7.1f}x"
        )
    print(
        "(hubstream directory incl. WAL/manifest after compaction: "
        f"{bits(ours['half_dir_bytes']):.3f} bits/item; "
        f"Carlyle rows: {carlyle['rows']:,}, theoretical 64 bits + row overhead per 64 items)"
    )
    print(
        orjson.dumps(
            {
                "bench": "batch_disk",
                "items": args.items,
                "group_size_items": args.group_size,
                "hubstream_bits_per_item_all_pending": round(bits(ours["full_sst_bytes"]), 4),
                "hubstream_bits_per_item_half_acked": round(bits(ours["half_sst_bytes"]), 4),
                "hubstream_dir_bits_per_item_half_acked": round(bits(ours["half_dir_bytes"]), 4),
                "carlyle_bits_per_item_all_pending": round(bits(carlyle["full_bytes"]), 4),
                "carlyle_bits_per_item_half_acked": round(bits(carlyle["half_bytes"]), 4),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
