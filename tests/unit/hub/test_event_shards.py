"""Event container shards: a recipient's shard is stable, in range, and fixed in its ledger."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ConfigError
from app.hub.cosmos_io import HubContainers, event_shard, ledger_doc, ledger_from_doc
from app.hub.model import Ledger


@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=256))
def test_a_recipient_always_maps_to_the_same_shard_in_range(recipient: str, shards: int) -> None:
    shard = event_shard(recipient, shards)
    assert 0 <= shard < shards
    assert shard == event_shard(recipient, shards)


def test_recipients_spread_over_the_shards() -> None:
    used = {event_shard(f"57900000{i:05d}", 64) for i in range(1000)}
    assert len(used) == 64


def test_the_ledger_keeps_its_shard_and_old_ledgers_read_as_shard_zero() -> None:
    ledger = Ledger("r", next_seq=7, shard=13)
    assert ledger_from_doc(ledger_doc(ledger)) == ledger
    old = ledger_doc(Ledger("r"))
    del old["shard"]
    assert ledger_from_doc(old).shard == 0


def test_fewer_containers_than_a_ledger_needs_is_a_clear_configuration_error() -> None:
    containers = cast(list[Any], ["events", "events-1"])
    io = HubContainers(containers, *cast(list[Any], [None] * 4))
    assert io.events(Ledger("r", shard=1)) == "events-1"
    assert io.new_ledger("r").shard == event_shard("r", 2)
    with pytest.raises(ConfigError, match="HUB_EVENT_CONTAINERS must never shrink"):
        io.events(Ledger("r", shard=5))
