"""Operator controls over the engine on in-memory ports: request parsing, pause / resume (a paused
writer receives nothing, then the rest in order), step only on a stopped writer, the JSON views."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from app.errors import InvalidInput
from app.pipeline.definition import load_definition
from app.pipeline.errors import PipelineNotRunning, UnknownWriter, WriterBusy
from app.pipeline.memory import MemoryStateStore
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import WriterState
from app.pipeline.operator import MAX_LOG_RANGE, PipelineOperator, log_range, mark_offset
from app.pipeline.service import PipelineHost
from app.settings import Settings

from .helpers import RecordingSink, fill_log, runtime, wait_for


def test_log_range_defaults_and_bounds() -> None:
    assert log_range({}) == (0, 99)
    assert log_range({"from": "7"}) == (7, 106)
    assert log_range({"from": "5", "to": "5"}) == (5, 5)
    assert log_range({"from": "0", "to": str(MAX_LOG_RANGE - 1)}) == (0, MAX_LOG_RANGE - 1)
    for query, reason in [
        ({"from": "0", "to": str(MAX_LOG_RANGE)}, "at most"),
        ({"from": "-1"}, "0 <= from"),
        ({"from": "4", "to": "3"}, "0 <= from"),
        ({"from": "x"}, "not an integer"),
        ({"to": "1.5"}, "not an integer"),
    ]:
        with pytest.raises(InvalidInput, match=reason):
            log_range(query)


def test_mark_offset_validates_the_body() -> None:
    assert mark_offset({"offset": -1}, 10) == -1
    assert mark_offset({"offset": 9}, 10) == 9
    for body, reason in [
        ({"offset": 10}, "outside -1..9"),
        ({"offset": -2}, "outside"),
        ({"offset": "3"}, "not an integer"),
        ({"offset": True}, "not an integer"),
        ({"offset": 2.0}, "not an integer"),
        ({}, "JSON object"),
        ([3], "JSON object"),
        (None, "JSON object"),
    ]:
        with pytest.raises(InvalidInput, match=reason):
            mark_offset(body, 10)


async def _append(log: object, seqs: range) -> None:
    entries = [NewEntry(Message(Op.INSERT, 1, "A", {"seq": i}), Mode.SYNC) for i in seqs]
    await log.append(entries)  # type: ignore[attr-defined]


async def test_a_paused_writer_receives_nothing_then_the_rest_in_order() -> None:
    log = await fill_log("A" * 10)
    paused, other = RecordingSink(), RecordingSink()
    run = runtime(log, MemoryStateStore(), {"paused": paused, "other": other}, {})
    await run.start()
    try:
        await wait_for(lambda: paused.received == list(range(10)))
        assert await run.pause("paused") is True
        assert run.slots["paused"].phase == "paused" and not run.slots["paused"].running
        assert await run.pause("paused") is False  # already paused
        await _append(log, range(10, 30))
        await wait_for(lambda: other.received == list(range(30)))
        assert paused.received == list(range(10))
        assert run.slots["paused"].state.offset == 9

        assert await run.resume("paused") == ["paused"]
        await wait_for(lambda: run.slots["paused"].state.offset == 29)
        assert paused.received == list(range(30))  # nothing lost, nothing twice, in order
        assert run.slots["paused"].phase == "running"
    finally:
        await run.stop()


async def test_phase_of_a_failed_writer_and_resume_all() -> None:
    log = await fill_log("A" * 4)
    bad = RecordingSink(fail_when=lambda seqs: True)
    run = runtime(log, MemoryStateStore(), {"bad": bad, "good": RecordingSink()}, {})
    await run.start()
    try:
        await wait_for(lambda: not run.slots["bad"].running)
        assert run.slots["bad"].phase == "failed"
        await run.pause("good")
        assert sorted(await run.resume(None)) == ["bad", "good"]
        assert run.slots["good"].phase == "running"
    finally:
        await run.stop()


def _host(tmp_path: Path) -> PipelineHost:
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        "name: ops\n"
        f"reader: {{type: jsonl, path: {tmp_path / 'in.jsonl'}}}\n"
        "writers:\n"
        f"  - {{name: c0, type: jsonl, path: {tmp_path / 'c0.jsonl'}}}\n"
    )
    return PipelineHost(Settings(), load_definition(file))


async def test_operator_views_and_refusals(tmp_path: Path) -> None:
    host = _host(tmp_path)
    operator = PipelineOperator(host)
    assert operator.summary().model_dump() == {
        "name": "ops",
        "state": "starting",
        "writers": [{"name": "c0", "state": "starting"}],
    }
    with pytest.raises(PipelineNotRunning):
        await operator.status()

    log = await fill_log("AB" * 3)
    sink = RecordingSink()
    host.runtime = run = runtime(log, MemoryStateStore(), {"c0": sink}, {"c0": WriterState(1)})
    await run.start()
    try:
        await wait_for(lambda: run.slots["c0"].state.offset == 5)
        status = await operator.status()
        assert status.commit_log.end_offset == 6
        assert status.writers["c0"].model_dump() == {
            "state": "running",
            "offset": 5,
            "lag": 0,
            "stopped": False,
            "last_error": None,
            "failed": None,
            "namespaces": {"A": 4, "B": 5},
            "received": 4,
            "dead_lettered": 0,
        }
        with pytest.raises(WriterBusy):
            await operator.step("c0")
        with pytest.raises(UnknownWriter):
            await operator.pause("nope")
        with pytest.raises(UnknownWriter):
            await operator.mark("nope", {"offset": 1})

        assert (await operator.pause("c0")).state == "paused"
        await _append(log, range(6, 8))
        stepped = await operator.step("c0")
        assert (stepped.stepped, stepped.ok, stepped.offset, stepped.state) == (
            6,
            True,
            6,
            "paused",
        )
        assert sink.received == [2, 3, 4, 5, 6]
        marked = await operator.mark("c0", {"offset": 7})
        assert (marked.offset, marked.lag, marked.state) == (7, 0, "paused")
        assert sink.received == [2, 3, 4, 5, 6]  # the mark wrote nothing
        offsets = await operator.offsets()
        assert offsets.writers["c0"].offset == 7 and offsets.end_offset == 8
        assert (await operator.resume("c0")).changed is True
        assert operator.summary().model_dump()["writers"] == [{"name": "c0", "state": "running", "offset": 7}]
    finally:
        await run.stop()


async def test_a_scrape_answers_while_a_pipeline_starts_and_names_its_writers_once_it_runs(
    tmp_path: Path,
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from app.pipeline.web import PipelineViews

    host = _host(tmp_path)
    views = PipelineViews({"ops": PipelineOperator(host)}, host.settings)

    async def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        response = await views.scrape(make_mocked_request("GET", "/metrics"))
        assert isinstance(response, web.Response) and response.status == 200
        assert isinstance(response.body, bytes)
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.body.decode())
            for s in family.samples
        }

    starting = await scrape()
    assert starting[("hubstream_pipeline_running", (("pipeline", "ops"),))] == 0
    assert not [name for name, _ in starting if name.startswith("hubstream_pipeline_writer")]

    log = await fill_log("AB" * 2)
    host.runtime = run = runtime(log, MemoryStateStore(), {"c0": RecordingSink()}, {"c0": WriterState(1)})
    await run.start()
    try:
        await wait_for(lambda: run.slots["c0"].state.offset == 3)
        running = await scrape()
        writer = (("pipeline", "ops"), ("writer", "c0"))
        assert running[("hubstream_pipeline_running", (("pipeline", "ops"),))] == 1
        assert running[("hubstream_pipeline_writer_offset", writer)] == 3
        assert running[("hubstream_pipeline_commit_log_end_offset", (("pipeline", "ops"),))] == 4
    finally:
        await run.stop()


async def test_a_pause_outlives_a_restart_until_resumed() -> None:
    """Before, the pause lived in the process only: a restarted pipeline wrote on at once."""
    log, store = await fill_log("A" * 10), MemoryStateStore()
    paused, other = RecordingSink(), RecordingSink()
    first = runtime(log, store, {"paused": paused, "other": other}, {})
    await first.start()
    await wait_for(lambda: paused.received == list(range(10)))
    assert await first.pause("paused") is True
    await first.stop()
    assert store.writers["paused"].paused and not store.writers["other"].paused

    await _append(log, range(10, 20))
    again = runtime(log, store, {"paused": paused, "other": other}, dict(store.writers))
    await again.start()
    try:
        await wait_for(lambda: other.received == list(range(20)))
        assert again.slots["paused"].phase == "paused" and paused.received == list(range(10))
        assert await again.resume("paused") == ["paused"]
        await wait_for(lambda: paused.received == list(range(20)))
    finally:
        await again.stop()
    assert not store.writers["paused"].paused, "the resume is kept too"
