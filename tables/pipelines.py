"""The pipeline offsets table: RocksDB-backed, changelogged, one partition (one pipeline per app).

Keys: `writer/<name>` -> WriterState JSON (offset, failed range, per-namespace offsets) and
`reader/<namespace>` -> ReaderState JSON (mode, position, log offset). The changelog topic
(`<app id>-offsets-changelog`) is compacted, so it keeps the latest state per writer and namespace.
"""

from __future__ import annotations

from typing import Any

import faust

__all__ = ["OFFSETS_TABLE", "offsets_table"]

OFFSETS_TABLE = "offsets"


def offsets_table(app: faust.App) -> Any:
    return app.Table(
        OFFSETS_TABLE,
        default=None,
        partitions=1,
        key_type=str,  # changelog keys: raw utf-8; values: JSON (the app's default serializers)
        help="Pipeline writer offsets and reader states",
    )
