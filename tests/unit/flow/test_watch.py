"""The main job's poller: each stage is polled until it ends, then left alone."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from app.flow import watch
from app.flow.watch import FLOW_STAGES, FlowWatch
from app.progress import Stages
from app.settings import Settings

TPS = {("data-available", 0): 0}


def test_the_hub_and_mysql_stages_are_not_polled_once_they_ended(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = {"consumed": 0, "rows": 0}
    progress = {"consumed": 0, "rows": 0}

    def consumed(*_: object) -> dict[tuple[str, int], int]:
        asked["consumed"] += 1
        return {tp: progress["consumed"] for tp in TPS}

    def mysql_rows() -> int:
        asked["rows"] += 1
        return progress["rows"]

    monkeypatch.setattr(watch, "consumed", consumed)
    stages = Stages(Console(file=io.StringIO(), force_terminal=False), FLOW_STAGES)
    poller = FlowWatch(settings, stages, dict(TPS), "group", mysql_rows)
    poller.total = 10
    progress.update(consumed=4, rows=10)  # the mirror is done, the hub is not
    poller._poll()
    assert stages.finished("mysql") and not stages.finished("hub")
    progress.update(consumed=10)
    poller._poll()
    assert stages.finished("hub")
    before = dict(asked)
    poller._poll()
    poller._poll()
    assert asked == before, "ended stages were polled again"
