"""The binlog reader's resume rule: after the commit log confirmed any prefix of the entries, a
stream restarted from `resume_plan` emits exactly the entries after that prefix, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.pipeline.binlog import BinlogPosition, RowChange, resume_plan, row_entries
from app.pipeline.model import LogEntry, Mode, Op
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
    assert len(first) == sum(change.rows for change in changes)
    confirmed = data.draw(st.integers(0, len(first)))
    states: dict[str, ReaderState] = {}
    for offset, entry in enumerate(first[:confirmed]):
        log_entry = LogEntry(offset, 0, Mode.SYNC, entry.message.namespace, entry.message, entry.position)
        states[entry.message.namespace] = states.get(entry.message.namespace, ReaderState()).advanced(
            log_entry
        )
    plan = resume_plan(NAMESPACES, states)
    again = row_entries(_stream_from(changes, plan.start), dict(plan.seen))
    assert [e.position for e in again] == [e.position for e in first[confirmed:]]
    assert [e.message for e in again] == [e.message for e in first[confirmed:]]


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
