"""The dashboard's charts over time, in headless Chromium without any service: the page is served
next to a fake /api/dashboard that answers a scripted sequence of snapshots (counters growing, a
shard's counter reset, a subscription appearing, a batch completing, a writer stopping), polled
fast through ?poll= under Chromium's virtual time. Its chart functions are also called directly.

UPDATE_DASHBOARD_SCREENSHOT=1 copies the screenshot of the scripted page to docs/dashboard.png.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from app.dashboard.api_models import Dashboard
from app.dashboard.dashboard import PAGE_PATH
from app.web.models import to_wire

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"

BASE_MS = 1_767_261_600_000  # the scripted snapshots' clock: 2026-01-01 10:00 UTC
STEP_MS = 2_000
SAMPLES = 60
NEW_AT = 24  # billing-export appears in this snapshot
RESET_AT = 40  # audit-log's shard 1 moves to another worker: its delivered counter starts over
STOP_AT = 35  # the archive pipeline's s3 writer stops on a failed range
SHOT_SIZE = "1400,1800"

SHARDS = {"hub-save": 4, "audit-log": 2, "billing-export": 2}


# -- the scripted snapshots ---------------------------------------------------------------------


def _step(sub: str, shard: int, i: int) -> int:
    """Messages one shard delivers between snapshots i-1 and i (even: the rates are exact)."""
    if sub == "hub-save":
        per_s = 300 + 60 * math.sin(i / 6 + shard * 1.3)
    elif sub == "audit-log":
        per_s = 70 + 20 * math.sin(i / 4 + shard)
    else:
        per_s = 45 + 15 * math.sin(i / 3 + shard)
    return 2 * round(per_s)


def moved(sub: str, shard: int, i: int) -> bool:
    """audit-log's shard 1 runs on the other worker from snapshot RESET_AT on."""
    return sub == "audit-log" and shard == 1 and i >= RESET_AT


def _delivered(sub: str, shard: int, i: int) -> int:
    if moved(sub, shard, i):
        return sum(_step(sub, shard, j) for j in range(RESET_AT, i + 1))
    start = NEW_AT if sub == "billing-export" else 0
    offset = {"hub-save": 1_250_000, "audit-log": 20_000}.get(sub, 0)
    return offset + sum(_step(sub, shard, j) for j in range(start + 1, i + 1))


def _rate(sub: str, i: int) -> float:
    """Delivered per second between snapshots i-1 and i, every shard counting."""
    return sum(_step(sub, shard, i) for shard in range(SHARDS[sub])) / (STEP_MS / 1000)


def _mq_lag(sub: str, i: int) -> int:
    if sub == "hub-save":
        return round(2600 + 1500 * math.sin(i / 7))
    if sub == "audit-log":
        return round(380 + 260 * math.sin(i / 4 + 1))
    return max(0, 30_000 - 1_150 * (i - NEW_AT))


BATCHES = {  # id: user key, total items; 42 completes at snapshot 40, 43 appears at 30
    "41": ("ingest-2026-01-01", 240_000),
    "42": ("reprocess-dk1", 60_000),
    "43": ("backfill-q4", 160_000),
}


def _acked(batch: str, i: int) -> int:
    acked = {"41": 60_000 + 2_400 * i, "42": 1_500 * i, "43": 2_000 * (i - 30)}[batch]
    return min(acked, BATCHES[batch][1])


def _writer_lags(i: int) -> dict[tuple[str, str], int]:
    return {
        ("mysql-mirror", "mysql"): round(1_400 + 900 * math.sin(i / 5) ** 2),
        ("mysql-mirror", "search-index"): round(9_000 + 6_000 * math.cos(i / 11)),
        ("archive", "s3"): 600 + 300 * max(0, i - STOP_AT),
    }


def _hub_total(i: int) -> int:
    i -= i % 5  # the worker re-reads hub depth every 10 s: five polls see the same value
    return round(42_000 - 420 * i + 900 * math.sin(i / 4))


def snapshot(i: int) -> dict[str, Any]:
    """The dashboard's sections at poll i of the scripted run, as the worker builds them; served
    through the Dashboard model, like the worker's answer."""
    t = BASE_MS + i * STEP_MS
    workers = ["http://10.0.4.11:6066", "http://10.0.4.12:6066"]
    subscriptions = []
    topics = {"audit-log": "audit", "billing-export": "meter-readings", "hub-save": "data-available"}
    for name, topic in topics.items():
        if name == "billing-export" and i < NEW_AT:
            continue
        lag = _mq_lag(name, i)
        n = SHARDS[name]
        shards = [
            {
                "shard": k,
                "mq_lag": lag // n + (lag % n if k == 0 else 0),
                "rq_lag": 0,
                "worker": workers[0 if moved(name, k, i) else k % 2],
                "running": True,
                "delivered": _delivered(name, k, i),
                "failures": 0,
                "dead_lettered": 0,
                "sidelined": 0,
                "blocked_groups": [],
            }
            for k in range(n)
        ]
        dlq = 3 if name == "hub-save" else 0
        subscriptions.append(
            {
                "name": name,
                "topic": topic,
                "status": "running",
                "shard_count": n,
                "epoch": 0,
                "on_dlq": "block_group",
                "mq_lag": lag,
                "rq_depth": 0,
                "dlq_depth": dlq,
                "blocked_groups": [],
                "shards": shards,
            }
        )
    batches: list[dict[str, Any]] = []
    for batch_id, (user_key, total) in BATCHES.items():
        if batch_id == "43" and i < 30:
            continue
        acked = _acked(batch_id, i)
        batches.append(
            {
                "kind": "exact",
                "batch_id": batch_id,
                "user_key": user_key,
                "is_closed": True,
                "is_complete": acked == total,
                "total_items": total,
                "acked_items": acked,
                "pending_items": total - acked,
                "updated_at_ms": t - int(batch_id),
                "partition": 0,
                "worker": workers[0],
            }
        )
    batches.sort(key=lambda b: (b["is_complete"], -b["updated_at_ms"]))
    batches.append(
        {
            "kind": "estimated",
            "batch_id": "nightly-export",
            "user_key": "nightly",
            "is_closed": False,
            "is_complete": False,
            "total_items": None,
            "acked_items": None,
            "pending_items": 1_234,
            "updated_at_ms": t - 60_000,
            "partition": 1,
            "worker": workers[1],
        }
    )
    ends = {"mysql-mirror": 400_000 + 900 * i, "archive": 80_000 + 300 * i}
    pipelines: list[dict[str, Any]] = [
        {
            "name": name,
            "commit_log": f"hubstream.pipeline.{name}.log",
            "end_offset": ends[name],
            "readers": {},
            "writers": [
                {
                    "name": writer,
                    "next_offset": ends[name] - lag,
                    "lag": lag,
                    "stopped": writer == "s3" and i >= STOP_AT,
                    "error": "S3Error: AccessDenied" if writer == "s3" and i >= STOP_AT else None,
                }
                for (pipeline, writer), lag in sorted(_writer_lags(i).items())
                if pipeline == name
            ],
        }
        for name in ("archive", "mysql-mirror")
    ]
    total = _hub_total(i)
    shares = {"5790001330583": 0.41, "5790001330590": 0.27, "5790000705184": 0.18, "5790000610099": 0.14}
    depths = {a: round(total * f) for a, f in shares.items()}
    first = next(iter(depths))
    depths[first] += total - sum(depths.values())
    actors: list[dict[str, Any]] = [
        {"actor": a, "depth": d, "by_domain": {"timeseries": d * 3 // 4, "masterdata": d - d * 3 // 4}}
        for a, d in depths.items()
    ]
    ends_t0 = [416_702, 416_611, 417_020, 416_880]
    ends_t1 = [50_000 + 400 * i + 37 * p for p in range(4)]
    return {
        "composite_topics": [
            {
                "name": "data-available",
                "version": 2,
                "produce_pointer": 1,
                "k": 2,
                "records": sum(ends_t0) + sum(ends_t1),
                "storage_topics": [
                    {
                        "index": 0,
                        "name": "data-available",
                        "partitions": 4,
                        "k": 1,
                        "produce": False,
                        "end_offsets": ends_t0,
                        "records": sum(ends_t0),
                    },
                    {
                        "index": 1,
                        "name": "data-available.1",
                        "partitions": 4,
                        "k": 2,
                        "produce": True,
                        "end_offsets": ends_t1,
                        "records": sum(ends_t1),
                    },
                ],
            }
        ],
        "subscriptions": subscriptions,
        "batches": batches,
        "pipelines": pipelines,
        "hub": {"actors": actors, "actor_count": 4, "total_depth": total, "truncated": False},
        "workers": workers,
        "worker": workers[0],
        "errors": [],
        "as_of_ms": {"composite_topics": t, "subscriptions": t, "pipelines": t, "hub": t},
        "generated_at_ms": t,
        "took_ms": 38.2,
    }


# -- serving and rendering ----------------------------------------------------------------------


class _Served:
    def __init__(self, url: str) -> None:
        self.url = url
        self.api_calls = 0


@contextmanager
def serve(snapshots: list[dict[str, Any]], extra: dict[str, str] | None = None) -> Iterator[_Served]:
    """The page at /dashboard/; /api/dashboard answers the snapshots in turn, then the last again."""
    page = PAGE_PATH.read_bytes()
    pages = {path: body.encode() for path, body in (extra or {}).items()}
    served: _Served

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/api/dashboard":
                index = min(served.api_calls, len(snapshots) - 1)
                served.api_calls += 1
                answer = to_wire(Dashboard.model_validate(snapshots[index]))
                self._send(json.dumps(answer).encode(), "application/json")
            elif path == "/dashboard/":
                self._send(page, "text/html; charset=utf-8")
            elif path in pages:
                self._send(pages[path], "text/html; charset=utf-8")
            else:
                self.send_error(404)

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served = _Served(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, name="fake-dashboard", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def chromium(args: list[str], tmp_path: Path, budget_ms: int) -> subprocess.CompletedProcess[str]:
    """Headless Chromium under virtual time: timers run as fast as the page's fetches answer."""
    assert Path(CHROMIUM).exists(), "run make install (scripts/ensure_deb.sh installs chromium) first"
    base = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        f"--virtual-time-budget={budget_ms}",
    ]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=90, check=False)


class _Dom(HTMLParser):
    """Every element as (tag, attributes, ancestors' attributes), and the text of each element id."""

    VOID = ("br", "img", "meta", "link", "input", "path", "circle", "line")

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[dict[str, str]]]] = []
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a, [s[1] for s in self.stack]))
        if tag not in self.VOID:
            self.stack.append((tag, a))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, [s[1] for s in self.stack]))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, a in self.stack:
            if "id" in a:
                self.text[a["id"]] = self.text.get(a["id"], "") + data

    def find(self, tag: str, **want: str) -> list[dict[str, str]]:
        """Elements `tag` inside ancestors (or self) carrying each data-<key>=<value> of `want`."""
        keys = {f"data-{k}": v for k, v in want.items()}
        out = []
        for t, a, ancestors in self.elements:
            merged: dict[str, str] = {}
            for attrs in [*ancestors, a]:
                merged.update(attrs)
            if t == tag and all(merged.get(k) == v for k, v in keys.items()):
                out.append(a)
        return out


POLL_MS = 100


def render(served: _Served, tmp_path: Path, polls: int, query: str = "", *extra: str) -> _Dom:
    """The page's DOM once it has polled about `polls` + 10 times (virtual time: no waiting)."""
    url = f"{served.url}/dashboard/?poll={POLL_MS}{query}"
    result = chromium(["--dump-dom", *extra, url], tmp_path, (polls + 10) * POLL_MS)
    assert 'data-loaded="true"' in result.stdout, result.stderr[-2000:]
    assert served.api_calls >= polls
    return _Dom(result.stdout)


def series(dom: _Dom, chart: str) -> dict[str, dict[str, str]]:
    """Per drawn series of a chart: its path's point count and d, and its legend's current value."""
    paths = {group["data-series"]: path for path, group in in_series(dom, "path", chart)}
    legend = {li["data-series"]: li["data-value"] for li in dom.find("li", chart=chart)}
    assert set(paths) == set(legend)
    return {k: {"points": p["data-points"], "d": p["d"], "now": legend[k]} for k, p in paths.items()}


def in_series(dom: _Dom, tag: str, chart: str) -> list[tuple[dict[str, str], dict[str, str]]]:
    """Elements `tag` drawn for a series of `chart`, each with its series' group."""
    out = []
    for t, a, ancestors in dom.elements:
        groups = [x for x in ancestors if "data-series" in x]
        if t == tag and groups and any(x.get("data-chart") == chart for x in ancestors):
            out.append((a, groups[-1]))
    return out


def now(dom: _Dom, chart: str) -> str:
    [label] = [a for a in dom.find("span", chart=chart) if a.get("class") == "now"]
    return label["data-value"]


def commands(d: str) -> list[str]:
    """The path's commands, e.g. ["M", "L", "L", "M", "L"]."""
    return re.findall(r"[ML]", d)


def points(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+) (-?[\d.]+)", d)]


# -- the tests ----------------------------------------------------------------------------------


def test_scripted_history_draws_rates_lags_progress_and_depth(tmp_path: Path) -> None:
    shot = tmp_path / "dashboard.png"
    with serve([snapshot(i) for i in range(SAMPLES)]) as served:
        dom = render(served, tmp_path, SAMPLES, "", f"--screenshot={shot}", f"--window-size={SHOT_SIZE}")
    last = SAMPLES - 1

    # Every snapshot kept once (the last one, polled again, is not a new sample); tables still shown.
    assert dom.text["sample-count"] == str(SAMPLES)
    assert dom.text["subscription-count"] == "3" and dom.text["pipeline-count"] == "2"
    assert {a["data-chart"] for a in dom.find("figure")} == {"throughput", "lag", "batches", "writers", "hub"}

    # Throughput = delta delivered / delta t: hub-save over every interval; audit-log's interval
    # with the reset is left out (two subpaths); billing-export from its second snapshot.
    rates = series(dom, "throughput")
    assert set(rates) == {"audit-log", "billing-export", "hub-save"}
    assert rates["hub-save"]["points"] == str(SAMPLES - 1)
    assert commands(rates["hub-save"]["d"]) == ["M"] + ["L"] * (SAMPLES - 2)
    assert rates["audit-log"]["points"] == str(SAMPLES - 2)
    before, after = RESET_AT - 1, last - RESET_AT  # intervals 1..RESET_AT-1, then RESET_AT+1..last
    assert commands(rates["audit-log"]["d"]) == ["M"] + ["L"] * (before - 1) + ["M"] + ["L"] * (after - 1)
    assert rates["billing-export"]["points"] == str(last - NEW_AT)
    for sub in SHARDS:
        assert float(rates[sub]["now"]) == _rate(sub, last)
    assert float(now(dom, "throughput")) == sum(_rate(sub, last) for sub in SHARDS)
    # Time runs left to right across the plot; the newest point is at its right edge.
    xs = [x for x, _ in points(rates["hub-save"]["d"])]
    assert xs == sorted(xs) and xs[-1] == 410

    lags = series(dom, "lag")
    assert {k: v["points"] for k, v in lags.items()} == {
        "audit-log": str(SAMPLES),
        "billing-export": str(SAMPLES - NEW_AT),
        "hub-save": str(SAMPLES),
    }
    assert {k: int(v["now"]) for k, v in lags.items()} == {sub: _mq_lag(sub, last) for sub in SHARDS}
    assert int(now(dom, "lag")) == sum(_mq_lag(sub, last) for sub in SHARDS)

    # Batch progress in %: 42 completed during the window and stays drawn at 100 %.
    progress = series(dom, "batches")
    assert {k: v["points"] for k, v in progress.items()} == {
        "41": str(SAMPLES),
        "42": str(SAMPLES),
        "43": str(SAMPLES - 30),
    }
    expected = {b: 100 * _acked(b, last) / total for b, (_, total) in BATCHES.items()}
    assert {k: float(v["now"]) for k, v in progress.items()} == expected
    assert expected["42"] == 100 and now(dom, "batches") == "2"

    writers = series(dom, "writers")
    assert {k: v["points"] for k, v in writers.items()} == {
        f"{p} / {w}": str(SAMPLES) for p, w in _writer_lags(0)
    }
    assert {k: int(v["now"]) for k, v in writers.items()} == {
        f"{p} / {w}": lag for (p, w), lag in _writer_lags(last).items()
    }

    hub = series(dom, "hub")
    assert hub == {"total": {"points": str(SAMPLES), "d": hub["total"]["d"], "now": str(_hub_total(last))}}
    assert now(dom, "hub") == str(_hub_total(last))

    # The same page as an image: UPDATE_DASHBOARD_SCREENSHOT=1 makes it docs/dashboard.png (off by
    # default so a test run never dirties the working tree).
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    size = f"{int.from_bytes(png[16:20], 'big')},{int.from_bytes(png[20:24], 'big')}"
    assert size == SHOT_SIZE and len(png) > 100_000  # lines, text and tables: not a blank page
    if os.environ.get("UPDATE_DASHBOARD_SCREENSHOT") == "1":
        shutil.copyfile(shot, REPO / "docs" / "dashboard.png")


def test_window_drops_old_samples(tmp_path: Path) -> None:
    with serve([snapshot(i) for i in range(30)]) as served:
        dom = render(served, tmp_path, 30, "&window=20")  # 20 s: the last 11 snapshots, 2 s apart
    assert dom.text["sample-count"] == "11"
    assert series(dom, "lag")["hub-save"]["points"] == "11"
    assert series(dom, "throughput")["hub-save"]["points"] == "10"


def test_one_sample_many_series_and_no_data(tmp_path: Path) -> None:
    crowded = snapshot(0) | {
        "subscriptions": [
            {
                "name": f"sub-{k}",
                "topic": "t",
                "status": "running",
                "shard_count": 1,
                "epoch": 0,
                "on_dlq": "block_group",
                "mq_lag": 100 * k,
                "rq_depth": 0,
                "dlq_depth": 0,
                "blocked_groups": [],
                "shards": [{"shard": 0, "mq_lag": 100 * k, "rq_lag": 0, "delivered": 1000 * k}],
            }
            for k in range(1, 10)
        ],
        "batches": [],
        "pipelines": [],
        "hub": None,
    }
    with serve([crowded]) as served:
        dom = render(served, tmp_path, 1)
    assert dom.text["sample-count"] == "1"
    # A rate needs two samples; gauges show one dot per series; the 6 largest of 9 are drawn.
    assert "two samples" in dom.text["chart-throughput"] and not series(dom, "throughput")
    lags = series(dom, "lag")
    assert sorted(lags) == [f"sub-{k}" for k in range(4, 10)]
    assert all(v["points"] == "1" and commands(v["d"]) == ["M"] for v in lags.values())
    assert len(in_series(dom, "circle", "lag")) == 6
    assert [a["data-hidden"] for a in dom.find("p", chart="lag") if "data-hidden" in a] == ["3"]
    assert now(dom, "lag") == str(sum(100 * k for k in range(1, 10)))
    assert "no open batches" in dom.text["chart-batches"]
    assert "no pipeline writers" in dom.text["chart-writers"]
    assert "not read yet" in dom.text["chart-hub"]

    empty = snapshot(0) | {"subscriptions": [], "batches": [], "pipelines": [], "composite_topics": []}
    with serve([empty]) as served:
        dom = render(served, tmp_path, 1)
    assert "no subscriptions" in dom.text["chart-throughput"]
    assert "no subscriptions" in dom.text["chart-lag"]
    for chart in ("throughput", "lag", "batches", "writers"):
        assert not in_series(dom, "path", chart)
    assert series(dom, "hub") == {
        "total": {"points": "1", "d": series(dom, "hub")["total"]["d"], "now": str(_hub_total(0))}
    }


# The page's chart functions called directly: results as JSON in <pre id="out">.
HARNESS = """<!doctype html><html><body><pre id="out"></pre><script>%s</script><script>
"use strict";
const push = (ts, w, m) => ts.reduce((h, t) => Charts.pushSample(h, {t}, w, m), []).map((s) => s.t);
const hist = [
  {t: 0, c: {a: {0: 10, 1: 10}}},
  {t: 2000, c: {a: {0: 210, 1: 110}, b: {0: 0}}},
  {t: 4000, c: {a: {0: 410, 1: 5}, b: {0: 50}}},
  {t: 5000, c: {a: {0: 910, 1: 105}, b: {0: 60}}},
];
const box = {x: 10, y: 0, w: 100, h: 50};
const nine = [...Array(9).keys()].map((k) => ({key: `s${k}`, points: [[0, k]]}));
const R = {
  window: push([0, 1000, 2000, 3000, 4000, 5000], 2500, 100),
  max: push([0, 1000, 2000, 3000], 1e9, 2),
  same: push([0, 1000, 1000], 1e9, 100),
  back: push([0, 1000, 2000, 500], 1e9, 100),
  rate: Charts.rate({0: 100, 1: 50}, {0: 300, 1: 250}, 2000),
  rate_reset: Charts.rate({0: 100, 1: 5000}, {0: 300, 1: 20}, 2000),
  rate_new_shard: Charts.rate({0: 100}, {0: 300, 1: 7000}, 2000),
  rate_stopped: Charts.rate({0: 100, 1: null}, {0: null, 1: 5}, 2000),
  rate_no_time: Charts.rate({0: 1}, {0: 2}, 0),
  rates: Charts.rateSeries(hist, (s) => s.c),
  gauges: Charts.gaugeSeries(hist.map((s) => ({t: s.t, g: s.c.b ? {b: s.c.b[0]} : {}})), (s) => s.g),
  scale: Charts.scalePoints([[0, 0], [50, 5], [100, 10], [150, null], [100, 20]], 0, 100, 10, box),
  scale_one: Charts.scalePoints([[7, 3]], 7, 7, 4, box),
  path: Charts.pathD([[1, 2], [3, 4], null, [5, 6], null, [7, 8], [9, 10]]),
  isolated: Charts.isolated([[1, 2], [3, 4], null, [5, 6], null, [7, 8]]),
  nice: [0, -3, 0.3, 1, 7, 10, 11, 1234, 2.5e6].map(Charts.niceMax),
  cap: Charts.capSeries(nine, 6),
  fmt: [null, 0, 0.5, 12.34, 999.9, 1234, 999999, 2.5e9].map(Charts.fmt),
  span: [0, 45000, 130000, 3900000].map(Charts.span),
  empty: Charts.render([]),
};
R.cap = {shown: R.cap.shown.map((s) => s.key), hidden: R.cap.hidden};
document.getElementById("out").textContent = JSON.stringify(R);
</script></body></html>"""


def test_chart_functions(tmp_path: Path) -> None:
    lib = re.search(r'<script id="chart-lib">(.*?)</script>', PAGE_PATH.read_text(), re.S)
    assert lib is not None
    with serve([snapshot(0)], {"/harness": HARNESS % lib.group(1)}) as served:
        result = chromium(["--dump-dom", f"{served.url}/harness"], tmp_path, 1_000)
    out = re.search(r'<pre id="out">(.*?)</pre>', result.stdout, re.S)
    assert out is not None and out.group(1), result.stderr[-2000:]
    r = json.loads(html.unescape(out.group(1)))

    # The history: a time window, a count cap, the same snapshot once, a clock stepping back.
    assert r["window"] == [3000, 4000, 5000]
    assert r["max"] == [2000, 3000]
    assert r["same"] == [0, 1000]
    assert r["back"] == [500]
    # Rates per second over the counters present in both samples; a reset or no time: unknown.
    assert r["rate"] == 200
    assert r["rate_reset"] is None
    assert r["rate_new_shard"] == 100  # the new shard's first value is only its baseline
    assert r["rate_stopped"] is None
    assert r["rate_no_time"] is None
    assert r["rates"] == [
        {"key": "a", "points": [[2000, 150], [4000, None], [5000, 600]]},
        {"key": "b", "points": [[2000, None], [4000, 25], [5000, 10]]},
    ]
    assert r["gauges"] == [{"key": "b", "points": [[0, None], [2000, 0], [4000, 50], [5000, 60]]}]
    # Scaling: t0..t1 across the box, 0..vmax bottom to top, clamped; one time at the right edge.
    assert r["scale"] == [[10, 50], [60, 25], [110, 0], None, [110, 0]]
    assert r["scale_one"] == [[110, 12.5]]
    assert r["path"] == "M1 2 L3 4 M5 6 M7 8 L9 10"
    assert r["isolated"] == [[5, 6], [7, 8]]
    assert r["nice"] == [1, 1, 0.5, 1, 10, 10, 20, 2000, 2.5e6]
    assert r["cap"] == {"shown": ["s3", "s4", "s5", "s6", "s7", "s8"], "hidden": 3}
    assert r["fmt"] == ["–", "0", "0.5", "12.3", "1k", "1.23k", "1M", "2.5G"]
    assert r["span"] == ["0s", "45s", "2m 10s", "1h 5m"]
    assert "waiting for the first sample" in r["empty"]
