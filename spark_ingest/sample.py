"""Sample input for the ingest job: N DataAvailable rows for R recipients across the three domains.

Weights are spread from 1 KB to 1 MB; `invalid` rows (spread evenly, each with a different
defect) let you see the rejects file at work. Output is Parquet, CSV or JSON lines, in one or
several files. Deterministic for a given seed. Run: `python -m spark_ingest.sample OUT -n 200000 -r 1000`.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from app.dataavailable import DOMAINS

__all__ = ["MESSAGE_TYPES", "SampleSpec", "generate", "recipient_ids", "sample_rows", "write_sample"]

MESSAGE_TYPES = {
    "timeseries": "NotifyValidatedMeasureData",
    "aggregations": "NotifyAggregatedMeasureData",
    "masterdata": "NotifyMasterData",
}
_DEFECTS: tuple[tuple[str, Any], ...] = (
    ("origin", "billing"),
    ("weight", 0),
    ("recipient", "not a valid actor!"),
    ("message_type", ""),
    ("weight", 60 * 1024 * 1024),
)
SCHEMA = pa.schema(
    [
        ("recipient", pa.string()),
        ("origin", pa.string()),
        ("message_type", pa.string()),
        ("weight", pa.int64()),
        ("bundleable", pa.bool_()),
    ]
)


@dataclass(frozen=True, slots=True)
class SampleSpec:
    rows: int
    recipients: int = 1000
    invalid: int = 0
    seed: int = 7


def recipient_ids(count: int) -> list[str]:
    """GLN-like 13-digit actor ids."""
    return [f"{5790000000000 + i:013d}" for i in range(count)]


def sample_rows(spec: SampleSpec) -> Iterator[dict[str, Any]]:
    """The rows, in order; every `rows // invalid`-th row carries one defect."""
    rng = random.Random(spec.seed)
    actors = recipient_ids(spec.recipients)
    every = spec.rows // spec.invalid if spec.invalid else 0
    defects = 0
    for index in range(spec.rows):
        origin = DOMAINS[index % len(DOMAINS)]
        row: dict[str, Any] = {
            "recipient": actors[rng.randrange(spec.recipients)],
            "origin": origin,
            "message_type": MESSAGE_TYPES[origin],
            "weight": rng.randint(1024, 1024 * 1024),
            "bundleable": rng.random() < 0.95,
        }
        if every and index % every == every - 1 and defects < spec.invalid:
            name, value = _DEFECTS[defects % len(_DEFECTS)]
            row[name] = value
            defects += 1
        yield row


def write_sample(rows: list[dict[str, Any]], path: Path, fmt: str, row_group_rows: int = 20_000) -> None:
    """Write rows to one file in the given format (Parquet row groups let Spark split the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        with open(path, "wb") as handle:
            for row in rows:
                handle.write(orjson.dumps(row) + b"\n")
        return
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=row_group_rows)
    elif fmt == "csv":
        pa_csv.write_csv(table, path)
    else:
        raise ValueError(f"unknown format {fmt!r}")


def generate(spec: SampleSpec, out: Path, fmt: str = "parquet", files: int = 1) -> list[Path]:
    """Write the sample to `out` (a file when files == 1, else a directory of `files` parts)."""
    rows = list(sample_rows(spec))
    suffix = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}[fmt]
    if files <= 1:
        write_sample(rows, out, fmt)
        return [out]
    paths = []
    per_file = -(-len(rows) // files)
    for part in range(files):
        path = out / f"part-{part:05d}.{suffix}"
        write_sample(rows[part * per_file : (part + 1) * per_file], path, fmt)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spark_ingest.sample", description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("-n", "--rows", type=int, default=200_000)
    parser.add_argument("-r", "--recipients", type=int, default=1000)
    parser.add_argument("--invalid", type=int, default=0)
    parser.add_argument("--format", choices=["parquet", "csv", "jsonl"], default="parquet")
    parser.add_argument("--files", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    spec = SampleSpec(args.rows, args.recipients, args.invalid, args.seed)
    paths = generate(spec, args.out, args.format, args.files)
    print(
        orjson.dumps({"files": [str(p) for p in paths], "rows": spec.rows, "invalid": spec.invalid}).decode()
    )


if __name__ == "__main__":
    main()
