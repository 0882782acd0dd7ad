"""The commit log's records: entries numbered by the log, one record per namespace run, and the
binary search that finds the record holding an entry number."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidInput
from app.pipeline.log_records import (
    COUNT_HEADER,
    FIRST_HEADER,
    Placed,
    decode_record,
    encode_records,
    invalid_entries,
    locate,
    record_numbers,
    record_seq,
)
from app.pipeline.model import LogEntry, Message, Mode, NewEntry, Op

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
rows = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
new_entries = st.builds(
    lambda op, ts, ns, data, before, mode, pos, doc: NewEntry(
        Message(op, ts, ns, data, before), mode, pos, doc
    ),
    st.sampled_from(list(Op)),
    st.integers(0, 2**48),
    st.sampled_from(["a", "b", "ns.t"]),
    rows,
    st.none() | rows,
    st.sampled_from(list(Mode)),
    st.dictionaries(st.text(max_size=5), st.integers(0, 10**9) | st.text(max_size=5), max_size=2),
    st.text(max_size=6),
)


def read_back(records: Any) -> list[LogEntry]:
    out: list[LogEntry] = []
    for record in records:
        numbers = record_numbers(record.headers)
        assert numbers == (record.first, record.count)
        out.extend(
            decode_record(record.key, record.first, record.count, record.value, record_seq(record.headers))
        )
    return out


@given(st.lists(new_entries, max_size=30), st.integers(0, 10**12), st.sampled_from([10**6, 300, 1]))
def test_entries_read_back_numbered_from_first(entries: list[NewEntry], first: int, max_bytes: int) -> None:
    records = encode_records(entries, first, max_bytes)
    back = read_back(records)
    assert [e.offset for e in back] == list(range(first, first + len(entries)))
    for new, entry in zip(entries, back, strict=True):
        msg = new.message
        assert (entry.key, entry.mode, entry.position, entry.doc_key) == (
            msg.namespace,
            new.mode,
            new.position,
            new.doc_key,
        )
        assert (entry.value.op, entry.timestamp_ms, entry.value.data, entry.value.before) == (
            msg.op,
            msg.timestamp_ms,
            msg.data,
            msg.before,
        )
    for record in records:  # one namespace per record; over max_bytes only when alone
        assert len({e.key for e in decode_record(record.key, record.first, record.count, record.value)}) == 1
        assert len(record.value) <= max_bytes or record.count == 1


def test_a_record_per_namespace_run() -> None:
    entries = [NewEntry(Message(Op.INSERT, 0, ns, {"i": i}), Mode.SYNC) for i, ns in enumerate("AABBBA")]
    records = encode_records(entries, 10, 10**6)
    assert [(r.key, r.first, r.count) for r in records] == [(b"A", 10, 2), (b"B", 12, 3), (b"A", 15, 1)]


def test_non_string_keys_are_written_as_strings() -> None:
    row: dict[Any, Any] = {1: "x"}  # as a MySQL reader may hand over
    entry = NewEntry(Message(Op.INSERT, 0, "t", row), Mode.SYNC)
    (record,) = encode_records([entry], 0, 10**6)
    assert decode_record(record.key, 0, 1, record.value)[0].value.data == {"1": "x"}


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        [(FIRST_HEADER, b"3")],
        [(COUNT_HEADER, b"3")],
        [(FIRST_HEADER, b"x"), (COUNT_HEADER, b"3")],
        [(FIRST_HEADER, b"3"), (COUNT_HEADER, b"0")],
        [(FIRST_HEADER, b"-1"), (COUNT_HEADER, b"2")],
        [(FIRST_HEADER, None), (COUNT_HEADER, b"2")],
    ],
)
def test_a_record_without_valid_numbers_is_not_a_log_record(headers: Any) -> None:
    assert record_numbers(headers) is None


@pytest.mark.parametrize(
    ("key", "value", "count"),
    [
        (b"t", b"not json", 1),
        (b"t", b"{}", 1),
        (b"t", b'[[1, 1, "insert", {}, {}, ""]]', 2),  # fewer entries than the headers say
        (b"t", b'[[1, 7, "insert", {}, {}, ""]]', 1),  # no such mode
        (b"t", b'[[1, 1, "upsert", {}, {}, ""]]', 1),  # no such op
        (b"t", b"[[1, 1]]", 1),
        (None, b'[[1, 1, "insert", {}, {}, ""]]', 1),  # no namespace
        (b"\xff", b'[[1, 1, "insert", {}, {}, ""]]', 1),
    ],
)
def test_a_record_that_is_not_its_entries_is_refused(key: bytes | None, value: bytes, count: int) -> None:
    with pytest.raises(InvalidInput):
        decode_record(key, 5, count, value)


def test_unreadable_entries_become_commands_that_keep_their_numbers() -> None:
    entries = invalid_entries(7, 3, "bad")
    assert [e.offset for e in entries] == [7, 8, 9] and all(e.is_command for e in entries)


# Each Kafka offset of a log: compacted away (None), a record that is not a log record ("x"), or a
# log record holding that many entries.
SLOTS: tuple[int | str | None, ...] = (None, "x", 1, 3)


def numbered(layout: tuple[int | str | None, ...], low: int) -> list[Placed]:
    placed, number = [], 0
    for k, slot in enumerate(layout, low):
        if isinstance(slot, int):
            placed.append(Placed(k, number))
            number += slot
    return placed


@pytest.mark.parametrize("length", range(0, 6))
def test_locate_finds_the_last_record_at_or_before_the_number_in_every_log(length: int) -> None:
    """Every log of up to 5 Kafka offsets, every number up to past its end: the answer is the last
    log record whose first entry is <= the number (else the log start), in at most
    log2(length) + 1 probes."""
    low = 100
    for layout in itertools.product(SLOTS, repeat=length):
        high = low + length
        records = numbered(layout, low)
        end = (records[-1].first + 3) if records else 0
        for number in range(end + 2):
            probes = 0

            def probe(k: int, records: list[Placed] = records) -> Placed | None:
                nonlocal probes
                probes += 1
                return next((r for r in records if r.kafka_offset >= k), None)

            expected = max((r.kafka_offset for r in records if r.first <= number), default=low)
            assert locate(number, low, high, probe) == expected, (layout, number)
            assert probes <= math.floor(math.log2(length)) + 1 if length else probes == 0


@given(st.lists(new_entries, min_size=1, max_size=30), st.integers(1, 10**9), st.sampled_from([10**6, 300]))
def test_entries_keep_their_append_order_across_records(
    entries: list[NewEntry], seq: int, max_bytes: int
) -> None:
    ordered = [replace(e, seq=seq + i) for i, e in enumerate(entries)]
    back = read_back(encode_records(ordered, 0, max_bytes))
    assert [e.seq for e in back] == [seq + i for i in range(len(entries))]
    assert [e.seq for e in read_back(encode_records(entries, 0, max_bytes))] == [0] * len(entries)
