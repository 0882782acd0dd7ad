"""The change-feed reader's page rule: only a page's last entry moves the token past the page, so a
restart after part of a page reached the commit log reads the page again instead of skipping its rest."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.pipeline.changefeed import feed_entries, range_key
from app.pipeline.model import Op


@given(st.integers(1, 30), st.data())
def test_a_cut_page_resumes_before_the_page(size: int, data: st.DataObject) -> None:
    items = [{"id": f"d{i}", "v": i, "_rid": "x", "_etag": "e", "_ts": 5, "_lsn": i} for i in range(size)]
    entries = feed_entries("hub-drawers", "feed:r", "t1", "t2", items, "id")
    confirmed = data.draw(st.integers(1, size))
    resumed_from = entries[confirmed - 1].position["feed:r"]
    assert resumed_from == ("t2" if confirmed == size else "t1")
    assert [e.doc_key for e in entries] == [f"d{i}" for i in range(size)]
    assert all(e.message.op is Op.UPDATE and set(e.message.data) == {"id", "v"} for e in entries)
    assert all(e.message.timestamp_ms == 5000 for e in entries)


def test_range_keys_are_stable() -> None:
    a = {"Range": {"min": "", "max": "FF", "isMinInclusive": True, "isMaxInclusive": False}}
    b = {"Range": {"isMaxInclusive": False, "max": "FF", "isMinInclusive": True, "min": ""}}
    assert range_key(a) == range_key(b) and range_key(a).startswith("feed:")
