from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.batch import bitfield

sizes = st.integers(min_value=0, max_value=300)


@given(sizes)
def test_filled_has_exactly_size_bits_set(size: int) -> None:
    buf = bitfield.filled(size)
    assert len(buf) == (size + 7) // 8
    assert bitfield.count_set(buf) == size
    assert all(bitfield.is_set(buf, i) for i in range(size))
    assert not any(bitfield.is_set(buf, i) for i in range(size, len(buf) * 8))


@given(st.data())
def test_clear_and_set_match_a_python_set(data: st.DataObject) -> None:
    size = data.draw(st.integers(min_value=1, max_value=300))
    buf = bitfield.filled(size)
    model = set(range(size))
    ops = data.draw(
        st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, size - 1), max_size=40)), max_size=20)
    )
    for clear, indexes in ops:
        if clear:
            assert bitfield.clear_bits(buf, indexes) == len(model & set(indexes))
            model -= set(indexes)
        else:
            assert bitfield.set_bits(buf, indexes) == len(set(indexes) - model)
            model |= set(indexes)
        assert bitfield.count_set(buf) == len(model)
        assert {i for i in range(size) if bitfield.is_set(buf, i)} == model
        assert bitfield.is_empty(buf) == (not model)


@given(st.integers(1, 300), st.data())
def test_clearing_twice_is_idempotent(size: int, data: st.DataObject) -> None:
    indexes = data.draw(st.lists(st.integers(0, size - 1)))
    buf = bitfield.filled(size)
    first = bitfield.clear_bits(buf, indexes)
    snapshot = bytes(buf)
    assert bitfield.clear_bits(buf, indexes) == 0
    assert bytes(buf) == snapshot
    assert first == len(set(indexes))
