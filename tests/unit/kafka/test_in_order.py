"""The in-order rule for one partition (`app.kafka.in_order.InOrderCursor`): records handled
strictly in offset order from the position, a skipped record sought back, a stalled partition
sought back, and a jump that keeps coming back after the seeks (retention took the records) believed
by the readers' common rule. Checked exhaustively over every short delivery sequence."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from app.kafka.in_order import RESEEK_AFTER_S, STALLED_AFTER_S, InOrderCursor, Verdict
from app.kafka.sequence import BELIEVE_AFTER_S, MAX_REREADS


def test_cursor_verdicts() -> None:
    cursor = InOrderCursor(expected=5, last_progress=0.0)
    assert cursor.admit(4, 1.0) is Verdict.SEEN
    assert cursor.admit(6, 1.0) is Verdict.SEEK
    assert cursor.admit(7, 2.0) is Verdict.WAIT, "a seek back is under way"
    assert cursor.admit(7, 1.0 + RESEEK_AFTER_S) is Verdict.SEEK, "it brought nothing: again"
    assert cursor.admit(5, 7.0) is Verdict.HANDLE
    cursor.handled(5, 7.0)
    assert cursor.admit(6, 7.0) is Verdict.HANDLE


def test_cursor_stalls_only_with_records_left_and_no_progress() -> None:
    cursor = InOrderCursor(expected=5, last_progress=0.0)
    assert not cursor.stalled(5, 100.0), "nothing left"
    assert not cursor.stalled(9, STALLED_AFTER_S - 1), "progress was recent"
    assert cursor.stalled(9, STALLED_AFTER_S)
    assert not cursor.stalled(9, STALLED_AFTER_S + 1), "the seek back is given time"


def test_a_jump_that_keeps_coming_back_is_believed() -> None:
    """The stored position is 5 and retention took offsets 5-9: every seek back lands on 10. Before
    the common rule the cursor sought back forever and the partition's acks were never handled."""
    cursor = InOrderCursor(expected=5, last_progress=0.0)
    now = 0.0
    verdicts = []
    for _ in range(MAX_REREADS + 1):
        now += RESEEK_AFTER_S
        verdicts.append(cursor.admit(10, now))
    assert verdicts == [Verdict.SEEK] * MAX_REREADS + [Verdict.HANDLE]
    cursor.handled(10, now)
    assert cursor.admit(11, now) is Verdict.HANDLE


def test_another_record_ahead_starts_the_count_again() -> None:
    cursor = InOrderCursor(expected=5, last_progress=0.0)
    now = 0.0
    for _ in range(MAX_REREADS):
        now += RESEEK_AFTER_S
        assert cursor.admit(10, now) is Verdict.SEEK
    now += RESEEK_AFTER_S
    assert cursor.admit(12, now) is Verdict.SEEK, "a different jump: seen once"
    now += RESEEK_AFTER_S
    assert cursor.admit(5, now) is Verdict.HANDLE, "the seek back found the record"


def test_handled_offsets_follow_the_position() -> None:
    """Exhaustive: every delivery sequence of up to 6 records over offsets 0-4, from every position
    0-2, with deliveries 1 s or RESEEK_AFTER_S apart (over 110,000 sequences)."""
    cases = 0
    for length in range(1, 7):
        for deliveries in itertools.product(range(5), repeat=length):
            for start in range(3):
                for step_s in (1.0, RESEEK_AFTER_S):
                    check_deliveries(deliveries, start, step_s)
                    cases += 1
    assert cases > 110_000


def check_deliveries(deliveries: Sequence[int], start: int, step_s: float) -> None:
    """Whatever order, repeats and holes the consumer delivers in, what is handled is increasing
    from start, each offset once. A hole is sought back, and handled past only when the same record
    ahead was judged more than MAX_REREADS times in a row over at least BELIEVE_AFTER_S."""
    cursor = InOrderCursor(expected=start, last_progress=0.0)
    handled: list[int] = []
    run: tuple[int, list[float]] | None = None  # the record ahead judged in a row, and when
    now = 0.0
    for offset in deliveries:
        now += step_s
        expected = cursor.expected
        verdict = cursor.admit(offset, now)
        if offset <= expected:
            assert verdict is (Verdict.HANDLE if offset == expected else Verdict.SEEN)
        elif verdict is not Verdict.WAIT:
            run = (offset, [*run[1], now]) if run and run[0] == offset else (offset, [now])
            times = run[1]
            believed = len(times) > MAX_REREADS and times[-1] - times[0] >= BELIEVE_AFTER_S
            assert verdict is (Verdict.HANDLE if believed else Verdict.SEEK)
        if verdict is Verdict.HANDLE:
            cursor.handled(offset, now)
            handled.append(offset)
            run = None
    assert handled == sorted(set(handled))
    assert not handled or handled[0] >= start
