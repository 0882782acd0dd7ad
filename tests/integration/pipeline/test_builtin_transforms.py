"""Built-in steps end to end: a JSON-lines file through `hubstream pipeline run --exit-when-idle`
into MariaDB, behind skip, rename, omit and pick; the table holds exactly what the chain lets
through, as the chain shaped it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from .support import run_until_idle

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_built_in_steps_shape_what_reaches_mysql(
    mysql: pymysql.connections.Connection[Any], unique: str, tmp_path: Path
) -> None:
    table = f"shaped_{unique}"
    with mysql.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id VARCHAR(16) PRIMARY KEY, amount BIGINT)")
    try:
        rows = [
            {"id": f"o{i}", "status": "paid" if i % 3 else "open", "total": 10 * i, "secret": "x"}
            for i in range(30)
        ]
        source = tmp_path / "orders.jsonl"
        source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
        file = tmp_path / "pipeline.yaml"
        file.write_text(
            f"name: shaped-{unique}\nbatch_size: 8\nbatch_wait_s: 0.05\n"
            f"reader: {{type: jsonl, path: {source}, namespace: shop.orders}}\n"
            "writers:\n"
            f"  - name: mirror\n    type: mysql\n    table: {table}\n    steps:\n"
            "      - {skip: {field: status, operator: '==', match: paid}}\n"
            "      - {rename: {total: amount}}\n"
            "      - {omit: secret}\n"
            "      - {pick: [id, amount]}\n"
        )
        done = run_until_idle(file, tmp_path)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        with mysql.cursor() as cur:
            cur.execute(f"SELECT id, amount FROM `{table}` ORDER BY id")
            stored = {str(r[0]): int(r[1]) for r in cur.fetchall()}
        assert stored == {r["id"]: r["total"] for r in rows if r["status"] == "paid"}
    finally:
        with mysql.cursor() as cur:
            cur.execute(f"DROP TABLE `{table}`")
