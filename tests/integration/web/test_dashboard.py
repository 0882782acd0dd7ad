"""The dashboard JSON matches what was written (true end offsets, lag, DLQ depth, batch progress,
pipeline offsets, hub depth); the page rendered by headless Chromium shows the same numbers."""

from __future__ import annotations

import re
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from app.kafka.broker import broker_for
from tests.integration.web.conftest import Seeded

CHROMIUM = "/usr/bin/chromium"


def _dashboard(seeded: Seeded, want: Any = None, timeout_s: float = 30.0) -> dict[str, Any]:
    """/api/dashboard once every section has a value (the hub section fills in the background)."""
    deadline = time.monotonic() + timeout_s
    while True:
        data: dict[str, Any] = seeded.worker.json("GET", "/api/dashboard")
        ready = data["hub"] is not None and not data["errors"] and (want is None or want(data))
        if ready or time.monotonic() > deadline:
            return data
        time.sleep(0.5)


@pytest.mark.integration
def test_api_dashboard_reports_what_was_written(seeded: Seeded) -> None:
    def hub_filled(d: dict[str, Any]) -> bool:
        return {a["actor"]: a["depth"] for a in d["hub"]["actors"]} == seeded.hub_depth

    data = _dashboard(seeded, hub_filled)
    assert data["errors"] == []

    [topic] = [t for t in data["compositeTopics"] if t["name"] == seeded.topic]
    assert topic["producePointer"] == 1 and len(topic["storageTopics"]) == 2
    tps = [(s["name"], p) for s in topic["storageTopics"] for p in range(s["partitions"])]
    ends = broker_for(seeded.settings).end_offsets(tps)
    assert [o for s in topic["storageTopics"] for o in s["endOffsets"]] == ends
    assert topic["records"] == sum(ends) == seeded.mq_records

    [sub] = [s for s in data["subscriptions"] if s["name"] == seeded.subscription]
    assert sub["status"] == "stopped" and sub["shardCount"] == 2
    assert sub["mqLag"] == seeded.mq_records  # never consumed: every record is lag
    assert sum(s["mqLag"] for s in sub["shards"]) == seeded.mq_records
    assert sub["dlqDepth"] == seeded.dlq_records and sub["rqDepth"] == 0
    assert sub["blockedGroups"] == []

    [batch] = [b for b in data["batches"] if b["batchId"] == str(seeded.batch_id)]
    assert (batch["ackedItems"], batch["totalItems"]) == (seeded.batch_acked, seeded.batch_total)
    assert batch["pendingItems"] == seeded.batch_total - seeded.batch_acked and not batch["isComplete"]

    [pipeline] = [p for p in data["pipelines"] if p["name"] == seeded.pipeline]
    assert pipeline["endOffset"] == seeded.log_records
    [writer] = pipeline["writers"]
    assert writer["name"] == "mysql" and writer["nextOffset"] == seeded.writer_next_offset
    assert writer["lag"] == seeded.log_records - seeded.writer_next_offset

    assert {a["actor"]: a["depth"] for a in data["hub"]["actors"]} == seeded.hub_depth
    assert data["hub"]["totalDepth"] == sum(seeded.hub_depth.values())
    assert data["workers"] == [seeded.worker.url]


class _DataValues(HTMLParser):
    """Collects elements carrying data-value, with their enclosing data-* context."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[dict[str, str]] = []
        self.values: list[tuple[dict[str, str], str]] = []
        self.by_id: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        context = {
            **(self.stack[-1] if self.stack else {}),
            **{k: v for k, v in a.items() if k.startswith("data-")},
        }
        if tag not in ("br", "img", "meta", "link", "input"):
            self.stack.append(context)
        if "data-value" in a:
            self.values.append((context, a["data-value"]))
            if "id" in a:
                self.by_id[a["id"]] = a["data-value"]

    def handle_endtag(self, tag: str) -> None:
        if self.stack and tag not in ("br", "img", "meta", "link", "input"):
            self.stack.pop()


def _chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert Path(CHROMIUM).exists(), "run make install (scripts/ensure_deb.sh installs chromium) first"
    base = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=8000",
    ]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=90, check=False)


def _field(values: list[tuple[dict[str, str], str]], field: str, **context: str) -> list[str]:
    keys = {f"data-{k}": v for k, v in context.items()}
    return [
        v
        for c, v in values
        if c.get("data-field") == field and all(c.get(k) == want for k, want in keys.items())
    ]


@pytest.mark.integration
def test_page_in_headless_chromium_shows_the_api_numbers(seeded: Seeded, tmp_path: Path) -> None:
    data = _dashboard(seeded, lambda d: bool(d["hub"]["actors"]))
    result = _chromium(["--dump-dom", seeded.worker.url + "/dashboard/"], tmp_path)
    assert 'data-loaded="true"' in result.stdout, result.stderr[-2000:]
    page = _DataValues()
    page.feed(result.stdout)
    assert page.by_id["composite-count"] == str(len(data["compositeTopics"]))
    assert page.by_id["subscription-count"] == str(len(data["subscriptions"]))
    assert page.by_id["batch-count"] == str(len(data["batches"]))
    assert page.by_id["hub-total"] == str(data["hub"]["totalDepth"])
    values = page.values

    [topic] = [t for t in data["compositeTopics"] if t["name"] == seeded.topic]
    for storage in topic["storageTopics"]:
        assert _field(values, "records", storage=storage["name"]) == [str(storage["records"])]
        assert _field(values, "endOffsets", storage=storage["name"]) == [
            ",".join(map(str, storage["endOffsets"]))
        ]
    [sub] = [s for s in data["subscriptions"] if s["name"] == seeded.subscription]
    assert _field(values, "dlqDepth", subscription=sub["name"]) == [str(sub["dlqDepth"])]
    for shard in sub["shards"]:
        shown = _field(values, "mqLag", subscription=sub["name"], shard=str(shard["shard"]))
        assert shown == [str(shard["mqLag"])]
    batch_id = str(seeded.batch_id)
    assert _field(values, "acked", batch=batch_id) == [str(seeded.batch_acked)]
    assert _field(values, "total", batch=batch_id) == [str(seeded.batch_total)]
    assert _field(values, "lag", pipeline=seeded.pipeline, writer="mysql") == [
        str(seeded.log_records - seeded.writer_next_offset)
    ]
    for actor, depth in seeded.hub_depth.items():
        assert _field(values, "depth", actor=actor) == [str(depth)]

    # The page renders to a real image (docs/dashboard.png comes from the unit test's scripted data:
    # tests/unit/web/test_dashboard_charts.py).
    shot = tmp_path / "dashboard.png"
    result = _chromium(
        [f"--screenshot={shot}", "--window-size=1400,1000", seeded.worker.url + "/dashboard/"], tmp_path
    )
    assert shot.exists() and shot.stat().st_size > 10_000, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(4))
    raise AssertionError(f"no sample {name}{labels}")


@pytest.mark.integration
def test_metrics_expose_lag_dlq_batch_progress_and_cosmos(seeded: Seeded) -> None:
    data = _dashboard(seeded)
    status, raw = seeded.worker.request("GET", "/metrics")
    assert status == 200
    text = raw.decode()
    [sub] = [s for s in data["subscriptions"] if s["name"] == seeded.subscription]
    for shard in sub["shards"]:
        lag = _metric(
            text,
            "hubstream_subscription_lag_records",
            subscription=sub["name"],
            shard=str(shard["shard"]),
            queue="mq",
        )
        assert lag == shard["mqLag"]
    assert _metric(text, "hubstream_subscription_dlq_depth", subscription=sub["name"]) == seeded.dlq_records
    assert _metric(text, "hubstream_batch_items", state="acked") == seeded.batch_acked  # its one open batch
    assert _metric(text, "hubstream_batch_items", state="total") == seeded.batch_total
    lag = _metric(text, "hubstream_pipeline_writer_lag_records", pipeline=seeded.pipeline, writer="mysql")
    assert lag == seeded.log_records - seeded.writer_next_offset
    assert _metric(text, "hubstream_hub_queue_depth") == sum(seeded.hub_depth.values())
    assert _metric(text, "hubstream_hub_queue_depth_max") == max(seeded.hub_depth.values())
    assert not any(actor in text for actor in seeded.hub_depth), "/metrics names no actor"
    # The hub's depth reads (a read feed of the ledgers, a point read of each actor's stream)
    # went through the Cosmos hooks: counted and timed.
    assert _metric(text, "hubstream_cosmos_requests_total", method="GET", status="200") > 0
    assert _metric(text, "hubstream_cosmos_request_seconds_count", method="GET") > 0
    assert (
        _metric(text, "hubstream_http_requests_total", method="GET", route="/api/dashboard", status="200")
        >= 1
    )
    assert "# TYPE hubstream_subscription_lag_records gauge" in text
