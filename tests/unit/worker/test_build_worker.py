"""Capabilities are registered by name, in the order `hubstream worker` starts them."""

from __future__ import annotations

import pytest

from agents import CAPABILITIES, WORKER, WorkerContext, build_worker
from app.errors import ConfigError
from app.settings import Settings


def test_an_unknown_capability_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match=r"unknown capabilities \['agents.hub'\]"):
        build_worker(Settings(), ["batches", "agents.hub"])


def test_the_worker_runs_every_capability_but_pipelines_with_the_hub_before_the_flow() -> None:
    assert set(WORKER) == set(CAPABILITIES) - {"pipelines"}
    assert WORKER.index("hub") < WORKER.index("flow")


def test_the_flow_without_the_hub_says_what_is_missing() -> None:
    worker = WorkerContext(app=None, settings=Settings())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="hub capability"):
        worker.hub()
