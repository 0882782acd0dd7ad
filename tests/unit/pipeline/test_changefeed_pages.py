"""The change-feed reader's page rule: only a page's last entry moves the token past the page, so a
restart after part of a page reached the commit log reads the page again instead of skipping its rest."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.pipeline.changefeed import event_entries, feed_entries, range_key
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


def _tip(stream: str, index: int, count: int) -> dict[str, object]:
    events = [{"c": "Added", "d": {"n": index + k}, "m": None, "t": "t"} for k in range(count)]
    return {"p": stream, "id": "-1", "i": index, "n": index + count, "e": events, "u": [], "_ts": 7}


@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.data())
def test_an_event_store_page_gives_an_entry_per_event_and_a_cut_page_resumes_before_it(
    counts: list[int], data: st.DataObject
) -> None:
    items = [_tip(f"Favorites-{i}", 0, n) for i, n in enumerate(counts)]
    entries = event_entries("events", "feed:r", "t1", "t2", items, None)
    keys = [f"Favorites-{i}/{k}" for i, n in enumerate(counts) for k in range(n)]
    if not keys:  # no event on the page: one command entry still moves the token past it
        assert [(e.message.op, e.position) for e in entries] == [(Op.COMMAND, {"feed:r": "t2"})]
        return
    assert [e.doc_key for e in entries] == keys
    assert all(e.message.op is Op.INSERT and e.message.timestamp_ms == 7000 for e in entries)
    confirmed = data.draw(st.integers(1, len(entries)))
    assert entries[confirmed - 1].position["feed:r"] == ("t2" if confirmed == len(entries) else "t1")


def test_an_event_store_page_of_one_category_and_a_corrupt_document() -> None:
    corrupt = {**_tip("Favorites-x", 0, 2), "n": 5}  # 'n' disagrees with its events
    items = [_tip("Other-y", 0, 2), corrupt, _tip("Favorites-z", 3, 1)]
    entries = event_entries("events", "feed:r", "t1", "t2", items, "Favorites")
    assert [e.doc_key for e in entries] == ["Favorites-z/3"]
    assert entries[0].message.data == {
        "stream": "Favorites-z",
        "index": 3,
        "case": "Added",
        "data": {"n": 3},
        "meta": None,
        "time": "t",
    }
