"""Hypothesis strategies for the project's values, shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from app.dataavailable import DOMAINS, MAX_WEIGHT_BYTES, DataAvailable

__all__ = ["data_available"]

data_available = st.builds(
    DataAvailable,
    id=st.uuids().map(str),
    recipient=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}", fullmatch=True),
    origin=st.sampled_from(DOMAINS),
    message_type=st.text(min_size=1, max_size=30),
    weight=st.integers(1, MAX_WEIGHT_BYTES),
    bundleable=st.booleans(),
    batch_item_id=st.none() | st.from_regex(r"[0-9]{1,5}:[a-f0-9-]{8}:[0-9]{1,4}", fullmatch=True),
)
"""A valid DataAvailable (what `app.dataavailable.parse` accepts)."""
