"""The dashboard's own-worker section reads the services the worker's capabilities registered
(the worker context), not attributes on the Faust app."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from app.batch.model import EXACT_PREFIX, ExactBatch
from app.dashboard.api_models import LocalSections
from app.dashboard.dashboard import DashboardService
from app.settings import Settings
from app.web.models import to_wire

URL = "http://127.0.0.1:6066"


class Store:
    def __init__(self, rows: dict[bytes, bytes]) -> None:
        self.rows = rows

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return sorted((k, v) for k, v in self.rows.items() if k.startswith(prefix))


@dataclass
class Local:
    message_hub: Any = None
    subscriptions: Any = None
    batch_service: Any = None


def _dashboard(local: Local | None) -> DashboardService:
    app = SimpleNamespace(conf=SimpleNamespace(canonical_url=URL))
    return DashboardService(app, Settings(), local)  # type: ignore[arg-type]


def test_local_sections_show_this_workers_shards_and_batches() -> None:
    batch = ExactBatch(7, None, False, 60, 100, 1, 1_000, 2_000)
    rows = {EXACT_PREFIX + b"7": batch.encode()}
    service = SimpleNamespace(ready={0}, store=lambda partition: Store(rows))
    supervisor = SimpleNamespace(status=lambda: [{"subscription": "s", "shard": 0}])
    out = _dashboard(Local(subscriptions=supervisor, batch_service=service)).local_sections()
    assert out["shards"] == [{"subscription": "s", "shard": 0, "worker": URL}]
    assert [(b["batch_id"], b["worker"]) for b in out["batches"]] == [("7", URL)]
    assert out["errors"] == []


def test_a_worker_without_those_capabilities_shows_none() -> None:
    for local in (None, Local()):
        out = _dashboard(local).local_sections()
        assert (out["shards"], out["batches"], out["errors"]) == ([], [], [])


SHARD = {
    "subscription": "s",
    "shard": 0,
    "epoch": 1,
    "lease_epoch": 7,
    "running": True,
    "delivered": 5,
    "sidelined": 0,
    "dead_lettered": 1,
    "skipped": 0,
    "failures": 2,
    "mq_storage_idx": 0,
    "rq_storage_idx": 0,
    "rq_buffered": 0,
    "mq_held_at": None,
    "adopted": 0,
    "forgotten": 3,
    "late_records": 0,
    "missed_on_recovery": 0,
    "blocked_groups": ["g"],
}


def test_local_sections_go_out_camel_case_and_peers_read_them_back() -> None:
    batch = ExactBatch(7, "k", False, 60, 100, 1, 1_000, 2_000)
    service = SimpleNamespace(ready={0}, store=lambda partition: Store({EXACT_PREFIX + b"7": batch.encode()}))
    supervisor = SimpleNamespace(status=lambda: [SHARD])
    out = _dashboard(Local(subscriptions=supervisor, batch_service=service)).local_sections()
    out["errors"].append({"section": "batches", "reason": "r"})
    wire = to_wire(LocalSections.model_validate(out))
    assert wire["shards"][0]["deadLettered"] == 1 and wire["shards"][0]["blockedGroups"] == ["g"]
    assert wire["batches"][0]["ackedItems"] == 40 and wire["batches"][0]["updatedAtMs"] == 2_000
    assert LocalSections.model_validate(wire).model_dump() == out  # a peer's answer, as ours
