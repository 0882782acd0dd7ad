"""The seed's worked example and its "Message Failures" example, run through the engine."""

from __future__ import annotations

from app.pipeline.memory import MemoryStateStore
from app.pipeline.offsets import WriterState

from .helpers import RecordingSink, fill_log, runtime, wait_for

WORKED_KEYS = "AABBAABBCACBAACB"  # ids 0-15 of the seed's commit log


async def test_worked_example_redelivers_exactly_past_each_writer_offset() -> None:
    log = await fill_log(WORKED_KEYS)
    store = MemoryStateStore()
    c0, c1 = RecordingSink(), RecordingSink()
    # The state the crash left behind: c0 committed to 12, c1 to 13.
    run = runtime(log, store, {"c0": c0, "c1": c1}, {"c0": WriterState(12), "c1": WriterState(13)})
    await run.start()
    end = await log.end_offset()
    await wait_for(lambda: all(s.state.offset == end - 1 for s in run.slots.values()))
    await run.stop()

    assert end - 1 == 15
    assert c0.received == list(range(13, end))
    assert c1.received == list(range(14, end))
    assert store.writers["c0"].offset == store.writers["c1"].offset == 15
    # Per-namespace offsets: the last offset of each key each writer acknowledged.
    last_by_key = {key: i for i, key in enumerate(WORKED_KEYS)}
    assert store.writers["c0"].namespaces == {k: v for k, v in last_by_key.items() if v >= 13}


async def test_failed_bulk_write_stops_writer_then_replays_one_at_a_time() -> None:
    log = await fill_log("A" * 16)
    store = MemoryStateStore()
    broken = RecordingSink(fail_when=lambda seqs: True)
    first = runtime(log, store, {"c0": broken}, {"c0": WriterState(8)})
    await first.start()
    await wait_for(lambda: not first.slots["c0"].running)
    await first.stop()
    state = store.writers["c0"]
    assert state.offset == 8
    assert state.failed is not None and (state.failed.first, state.failed.last) == (9, 15)

    # Restart: the failed range 9-15 comes ONE message at a time; message 14 fails.
    flaky = RecordingSink(fail_when=lambda seqs: 14 in seqs)
    second = runtime(log, store, {"c0": flaky}, dict(store.writers))
    await second.start()
    await wait_for(lambda: not second.slots["c0"].running)
    await second.stop()
    assert flaky.calls == [[9], [10], [11], [12], [13]]
    state = store.writers["c0"]
    assert state.offset == 13
    assert state.failed is not None and state.failed.failed_offset == 14
    assert "offset=14" in second.flags.events[-1] and '"seq":14' in second.flags.events[-1]

    # With the sink healthy again the rest is replayed singly, then bulk mode resumes.
    healthy = RecordingSink()
    third = runtime(log, store, {"c0": healthy}, dict(store.writers))
    await third.start()
    await wait_for(lambda: third.slots["c0"].state.offset == 15)
    await log.append([_entry(16)])
    await wait_for(lambda: third.slots["c0"].state.offset == 16)
    await third.stop()
    assert healthy.calls == [[14], [15], [16]]
    assert store.writers["c0"].failed is None


async def test_other_writers_go_on_when_one_fails() -> None:
    log = await fill_log("AB" * 5)
    store = MemoryStateStore()
    bad, good = RecordingSink(fail_when=lambda seqs: True), RecordingSink()
    run = runtime(log, store, {"bad": bad, "good": good}, {})
    await run.start()
    await wait_for(lambda: run.slots["good"].state.offset == 9 and not run.slots["bad"].running)
    await run.stop()
    assert good.received == list(range(10))
    assert store.writers["bad"].offset == -1


async def test_operator_mark_and_step() -> None:
    log = await fill_log("A" * 5)
    store = MemoryStateStore()
    sink = RecordingSink(fail_when=lambda seqs: 2 in seqs)
    run = runtime(log, store, {"c0": sink}, {"c0": WriterState(0)})
    await run.start()
    await wait_for(lambda: not run.slots["c0"].running)
    result = await run.step("c0")  # replays offset 1 alone
    assert result["stepped"] == 1 and store.writers["c0"].offset == 1
    failed = await run.step("c0")
    assert failed["ok"] is False and store.writers["c0"].offset == 1
    await run.mark("c0", 2)  # acknowledge 2 without sending it
    await run.resume("c0")
    await wait_for(lambda: run.slots["c0"].state.offset == 4)
    await run.stop()
    assert sink.received == [1, 3, 4]
    assert store.writers["c0"].failed is None


def _entry(seq: int):  # type: ignore[no-untyped-def]
    from app.pipeline.model import Message, Mode, NewEntry, Op

    return NewEntry(Message(Op.INSERT, seq, "A", {"seq": seq}), Mode.SYNC)
