"""A container's survey from its documents (`hubstream es stats`), checked against the streams that
wrote them: counts of streams, batches and events, categories, and the streams a query matches."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from app.eventstore import EventStore, MemoryStreamStorage, Snapshot, StoreOptions
from app.eventstore.model import TIP_ID
from app.eventstore.survey import category_of, survey

from . import favorites as fav

NOW = datetime(2024, 5, 1, tzinfo=UTC)
STREAMS = ["Favorites-a", "Favorites-b", "Other-c"]


@settings(max_examples=25, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["Favorites-a", "Favorites-b", "Other-c"]), st.integers(1, 9), min_size=1)
)
async def test_the_survey_counts_what_the_streams_wrote(appends: dict[str, int]) -> None:
    storage = MemoryStreamStorage()
    store = EventStore(storage, StoreOptions(max_events_in_tip=2))
    for stream, n in appends.items():
        category = store.category(category_of(stream), fav.DECIDER, fav.CODEC, Snapshot())
        for i in range(n):
            await category.transact(stream, fav.Add(i, "x", NOW))
    found = survey(storage.documents.values(), category="Favorites", unfold_case="Compacted")
    assert found.streams == found.tips == len(appends)
    assert found.events == sum(appends.values())
    assert found.batches == sum(1 for (_, doc_id) in storage.documents if doc_id != TIP_ID)
    assert found.categories == {
        c: sum(1 for s in appends if category_of(s) == c) for c in {category_of(s) for s in appends}
    }
    assert sorted(s.stream for s in found.matching) == sorted(
        s for s in appends if s.startswith("Favorites-")
    )
    assert all(s.version == appends[s.stream] for s in found.matching)
    assert survey(storage.documents.values(), unfold_case="NoSuchCase").matching == []
