"""A commit-log entry survives encode and decode: op, mode, namespace, data, position and the
before image; data keys that are not strings are written as their strings (as JSON must)."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from app.pipeline.model import Message, Mode, NewEntry, Op, decode_entry, encode_entry

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
rows = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


@given(st.sampled_from(list(Op)), st.sampled_from(list(Mode)), rows, st.none() | rows, st.integers(0, 2**40))
def test_an_entry_reads_back_as_written(
    op: Op, mode: Mode, data: dict[str, object], before: dict[str, object] | None, ts: int
) -> None:
    entry = NewEntry(Message(op, ts, "shop.orders", data, before), mode, {"t[0]": 7}, "k")
    back = decode_entry(3, encode_entry(entry))
    assert (back.offset, back.mode, back.key, back.position) == (3, mode, "shop.orders", {"t[0]": 7})
    assert back.value == Message(op, ts, "shop.orders", data, before)


def test_keys_that_are_not_strings_are_written_as_strings() -> None:
    data: dict[object, object] = {1: "a", "b": {2: True}}  # a reader's own data may hold such keys
    entry = NewEntry(Message(Op.INSERT, 1, "ns", data), Mode.SYNC)  # type: ignore[arg-type]
    raw = orjson.loads(encode_entry(entry))
    assert (raw["data"], raw["op"], raw["mode"]) == ({"1": "a", "b": {"2": True}}, "insert", int(Mode.SYNC))
