"""Event containers: a cabinet's consecutive drawers go to distinct containers, fixed in the ledger."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ConfigError
from app.hub.cosmos_io import HubContainers
from app.hub.documents import ledger_doc, ledger_from_doc
from app.hub.model import CabinetKey, Ledger

cabinets = st.builds(CabinetKey, st.text(min_size=1, max_size=20), st.text(max_size=10), st.text(max_size=10))


@given(cabinets, st.integers(min_value=1, max_value=256), st.integers(min_value=0, max_value=10_000))
def test_a_drawer_always_maps_to_the_same_container_in_range(
    cabinet: CabinetKey, containers: int, ordinal: int
) -> None:
    ledger = Ledger("r", containers=containers)
    container = ledger.drawer_container(cabinet, ordinal)
    assert 0 <= container < containers
    assert container == Ledger("r", containers=containers).drawer_container(cabinet, ordinal)


@given(cabinets, st.integers(min_value=1, max_value=64), st.integers(min_value=0, max_value=1000))
def test_consecutive_drawers_of_a_cabinet_use_distinct_containers(
    cabinet: CabinetKey, containers: int, first: int
) -> None:
    """So a peek reading up to `containers` drawers in parallel reads as many small containers."""
    ledger = Ledger("r", containers=containers)
    used = {ledger.drawer_container(cabinet, first + i) for i in range(containers)}
    assert len(used) == containers


def test_first_drawers_of_cabinets_spread_over_the_containers() -> None:
    ledger = Ledger("r", containers=64)
    used = {ledger.drawer_container(CabinetKey(f"57900000{i:05d}", "d", "mt"), 0) for i in range(1000)}
    assert len(used) == 64


def test_the_ledger_keeps_its_container_count() -> None:
    ledger = Ledger("r", next_seq=7, containers=13)
    assert ledger_from_doc(ledger_doc(ledger)) == ledger


def test_fewer_containers_than_a_ledger_needs_is_a_clear_configuration_error() -> None:
    containers: list[Any] = ["events", "events-1"]  # names stand in for the ContainerProxy objects
    others: list[Any] = [None] * 4
    io = HubContainers(containers, *others)
    cabinet = CabinetKey("r", "d", "mt")
    ledger = io.new_ledger("r")
    assert ledger.containers == 2
    assert {io.events(ledger, cabinet, 0), io.events(ledger, cabinet, 1)} == set(containers)
    with pytest.raises(ConfigError, match="HUB_EVENT_CONTAINERS must never shrink"):
        io.events(Ledger("r", containers=5), cabinet, 0)
