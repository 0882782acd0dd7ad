"""The known-versions map of the hub's save: bounded, least recently used goes first."""

from __future__ import annotations

import pytest

from app.hub.known import KnownDocs, Recent


def test_the_least_recently_used_entry_goes_first_when_full() -> None:
    known: KnownDocs[int] = Recent(max_entries=2)
    known.put("a", 1, "e1")
    known.put("b", 2, "e2")
    assert known.get("a") == (1, "e1")  # a is now the most recently used
    known.put("c", 3, "e3")
    assert (known.get("a"), known.get("b"), known.get("c")) == ((1, "e1"), None, (3, "e3"))
    assert len(known) == 2


def test_a_newer_version_replaces_the_entry_and_drop_forgets_it() -> None:
    known: KnownDocs[int] = Recent()
    known.put("a", 1, "e1")
    known.put("a", 2, "e2")
    assert known.get("a") == (2, "e2")
    known.drop("a")
    known.drop("a")  # dropping what is not there is fine
    assert known.get("a") is None


def test_a_map_of_no_entries_is_refused() -> None:
    with pytest.raises(ValueError):
        Recent(max_entries=0)
