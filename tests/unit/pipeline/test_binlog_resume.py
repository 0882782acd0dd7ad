"""The binlog reader's resume rule: after the commit log confirmed any prefix of the entries, a
stream restarted from `resume_plan` emits exactly the entries after that prefix, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.pipeline.binlog_rows import BinlogPosition, RowChange, json_row, resume_plan, row_entries
from app.pipeline.log_records import encode_records
from app.pipeline.model import LogEntry, Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState

NAMESPACES = ("db.a", "db.b", "db.c")


@st.composite
def binlogs(draw: st.DrawFn) -> list[RowChange]:
    """Event groups across two binlog files, each with rows events (1-3 rows) of several tables."""
    changes = []
    events = st.tuples(st.sampled_from(NAMESPACES), st.integers(1, 3))
    groups = draw(st.lists(st.lists(events, min_size=1, max_size=4), max_size=12))
    rotate_at = draw(st.integers(0, len(groups)))
    for index, group in enumerate(groups):
        file = "binlog.000001" if index < rotate_at else "binlog.000002"
        start, row = 100 + 50 * index, 0
        for namespace, count in group:
            op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
            images = [{"id": draw(st.integers(0, 5)), "v": index} for _ in range(count)]
            before = None if op is Op.INSERT else images
            after = None if op is Op.DELETE else images
            if op is Op.UPDATE and draw(st.booleans()):  # some updates move their row's key
                after = [{**image, "id": image["id"] + 10} for image in images]
            changes.append(
                RowChange(op, namespace, ("id",), before, after, BinlogPosition(file, start, row), 0)
            )
            row += count
    return changes


def _stream_from(changes: list[RowChange], start: BinlogPosition | None) -> list[RowChange]:
    """What the server sends from a group start: every row of that group and the later ones."""
    if start is None:
        return changes
    return [
        c for c in changes if (c.position.file, c.position.group_start) >= (start.file, start.group_start)
    ]


@given(binlogs(), st.data())
def test_resume_emits_exactly_what_the_log_lacks(changes: list[RowChange], data: st.DataObject) -> None:
    first = row_entries(changes, {})
    moves = sum(
        1
        for c in changes
        if c.op is Op.UPDATE and c.before and c.after
        for old, new in zip(c.before, c.after, strict=True)
        if old["id"] != new["id"]
    )
    assert len(first) == sum(change.rows for change in changes) + moves  # a key move adds a delete
    confirmed = data.draw(st.integers(0, len(first)))
    states: dict[str, ReaderState] = {}
    for offset, entry in enumerate(first[:confirmed]):
        log_entry = LogEntry(offset, 0, Mode.SYNC, entry.message.namespace, entry.message, entry.position)
        states[entry.message.namespace] = states.get(entry.message.namespace, ReaderState()).advanced(
            log_entry
        )
    plan = resume_plan(NAMESPACES, states)
    again = row_entries(_stream_from(changes, plan.start), dict(plan.seen))
    if len(again) == len(first) - confirmed + 1:
        # Confirmed up to a key move's delete: the row is captured again, delete included (idempotent).
        assert again[0] == first[confirmed - 1] and again[0].message.op is Op.DELETE
        again = again[1:]
    assert [e.position for e in again] == [e.position for e in first[confirmed:]]
    assert [e.message for e in again] == [e.message for e in first[confirmed:]]


def test_an_update_that_moves_the_key_deletes_the_old_key_first() -> None:
    change = RowChange(
        Op.UPDATE, "db.a", ("id",), [{"id": 1, "v": 0}], [{"id": 1001, "v": 0}], BinlogPosition("f", 4, 3), 7
    )
    delete, update = row_entries([change], {})
    assert (delete.message.op, delete.doc_key, delete.message.data) == (Op.DELETE, "1", {"id": 1, "v": 0})
    assert (update.message.op, update.doc_key, update.message.data) == (
        Op.UPDATE,
        "1001",
        {"id": 1001, "v": 0},
    )
    assert (delete.position, update.position) == ({"binlog": ["f", 4, 2]}, {"binlog": ["f", 4, 3]})


def test_a_delete_keys_its_entry_by_the_row_it_removed() -> None:
    change = RowChange(
        Op.DELETE, "db.a", ("id", "k"), [{"id": 4, "k": "x"}], None, BinlogPosition("binlog.000001", 4), 7
    )
    (entry,) = row_entries([change], {})
    assert entry.doc_key == "4|x"
    assert entry.message.data == entry.message.before == {"id": 4, "k": "x"}


def test_namespaces_without_a_finished_snapshot_are_copied() -> None:
    done = ReaderState(Mode.SYNC, {"binlog": ["binlog.000001", 400, 2]}, 9)
    partial = ReaderState(Mode.COPY, {"binlog": ["binlog.000001", 120, -1], "pk": [17]}, 4)
    plan = resume_plan(NAMESPACES, {"db.a": done, "db.b": partial})
    assert plan.to_copy == ("db.b", "db.c")
    assert plan.start == BinlogPosition("binlog.000001", 120)  # the first snapshot's position
    assert plan.seen["db.a"] == BinlogPosition("binlog.000001", 400, 2)


def test_set_and_json_column_values_from_the_binlog_become_what_a_snapshot_reads() -> None:
    """The binlog library hands a SET column over as a Python set and a MySQL JSON column as a tree
    with bytes keys and strings; the commit log encodes neither (the reader retried for ever)."""
    row = json_row({"id": 1, "tags": {"red", "blue"}, "empty": set(), "doc": {b"a": [b"x", 1, {b"b": None}]}})
    assert row == {"id": 1, "tags": "blue,red", "empty": "", "doc": '{"a":["x",1,{"b":null}]}'}
    (record,) = encode_records([NewEntry(Message(Op.UPDATE, 0, "db.a", row), Mode.SYNC, {}, "1")], 0, 10**6)
    assert b"blue,red" in record.value


def test_a_quiet_table_does_not_hold_the_stream_start_back() -> None:
    """A table with no changes since its snapshot keeps the snapshot's position; the stream resumes
    where the busiest table got to (every row before it is in the log), not from the snapshot's
    binlog file, which the server may have purged. A snapshot not finished still starts it lower."""
    quiet = ReaderState(Mode.SYNC, {"binlog": ["binlog.000001", 4, -1]}, 3)
    busy = ReaderState(Mode.SYNC, {"binlog": ["binlog.000090", 800, 5]}, 9_000)
    plan = resume_plan(NAMESPACES, {"db.a": quiet, "db.b": busy})
    assert plan.start == BinlogPosition("binlog.000090", 800)
    assert plan.seen["db.a"] == BinlogPosition("binlog.000001", 4, -1)  # its own past is still skipped
    copying = ReaderState(Mode.COPY, {"binlog": ["binlog.000080", 120, -1], "pk": [17]}, 9_001)
    plan = resume_plan(NAMESPACES, {"db.a": quiet, "db.b": busy, "db.c": copying})
    assert plan.start == BinlogPosition("binlog.000080", 120)
