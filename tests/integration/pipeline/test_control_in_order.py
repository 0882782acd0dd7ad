"""Control records are applied strictly in offset order from the position the offsets table keeps.

An operator's mark sent while the pipeline is stopped, lost on its way to the control agent on the
next start (the crash point `pipeline.control.command_delivered`, armed with `raise`, drops it, as
Faust can drop a buffered record and commit past it), is read again and applied: the writer
replays from the mark, counted in its sink. Before, the agent applied whatever records came and the
mark was lost for good.

Killed between a mark's effect and the position written past it
(`pipeline.control.position_write`), the next start applies the mark again: the writer replays
from it once, as if nothing had happened.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import orjson
import pytest

from app.kafka.broker import broker_for
from app.pipeline.kafka_log import PipelineTopics
from app.pipeline.state import CONTROL_POSITION_KEY, read_changelog
from app.settings import Settings
from tests.support.soak import first_in_every_suite

from .support import cli, cli_json, free_port, start, stop, wait

pytestmark = pytest.mark.integration

LINES = 20  # offsets 0-19, then the reader's "copy complete" entry at 20


def _offsets(name: str, port: int) -> object:
    done = cli("offset", "list", name, port=port)  # fails until the process made its commit log
    return orjson.loads(done.stdout) if done.returncode == 0 else None


def _seqs(path: Path) -> Counter[int]:
    if not path.exists():
        return Counter()
    return Counter(orjson.loads(line)["data"]["seq"] for line in path.read_bytes().splitlines())


def _pending(stack: Settings, name: str) -> int | None:
    """Control records the agent has not applied: from its position as the changelog holds it to
    the control topic's end (None while the changelog holds no position)."""
    topics = PipelineTopics.of(name, stack.app_id)
    position = read_changelog(broker_for(stack), topics.changelog).get(CONTROL_POSITION_KEY)
    end = broker_for(stack).end_offsets([(topics.control, 0)])[0]
    return None if position is None else int(end - position)


@pytest.mark.timeout(300)
# The kill is the harsher fault (the agent's position is lost with the process); the dropped
# mark runs under -m soak, keeping make test within its budget.
@pytest.mark.parametrize("fault", first_in_every_suite(["killed before the position", "mark dropped"], 1))
def test_a_mark_lost_on_its_way_in_is_applied(
    stack: Settings, unique: str, tmp_path: Path, fault: str
) -> None:
    name = f"inorder-{unique}"
    source, out = tmp_path / "in.jsonl", tmp_path / "out"
    source.write_bytes(b"".join(orjson.dumps({"id": f"d{i}", "seq": i}) + b"\n" for i in range(LINES)))
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 5\nbatch_wait_s: 0.05\n"
        f"reader: {{type: jsonl, path: {source}, namespace: docs}}\n"
        "writers:\n"
        f"  - {{name: a, type: jsonl, path: {out / 'a.jsonl'}}}\n"
        f"  - {{name: b, type: jsonl, path: {out / 'b.jsonl'}}}\n"
    )
    port = free_port()
    proc = start(file, tmp_path, port)
    try:
        at_end = {"a": LINES, "b": LINES}
        wait(lambda: _offsets(name, port) == at_end, 90, "both writers at the end")
        wait(lambda: _pending(stack, name) == 0, 60, "the agent applied every control record")
        assert stop(proc) == 0
        once = Counter(range(LINES))
        assert _seqs(out / "a.jsonl") == once and _seqs(out / "b.jsonl") == once

        cli_json("offset", "mark", f"{name}/a", "9")  # no process: sent as control records
        cli_json("offset", "mark", f"{name}/b", "14")
        if fault == "mark dropped":
            proc = start(
                file, tmp_path, port, HUBSTREAM_CRASH_AT="pipeline.control.command_delivered:1:raise"
            )
        else:
            pending = _pending(stack, name)
            assert pending is not None and pending >= 2, pending
            nth = pending - 1  # the mark for a, the second to last record: killed after its effect
            proc = start(
                file, tmp_path, port, HUBSTREAM_CRASH_AT=f"pipeline.control.position_write:{nth}:kill"
            )
            assert proc.wait(120) == -signal.SIGKILL, "killed at the position write"
            proc = start(file, tmp_path, port)
        replayed_a = once + Counter(range(10, LINES))
        replayed_b = once + Counter(range(15, LINES))
        wait(
            lambda: _seqs(out / "a.jsonl") == replayed_a and _seqs(out / "b.jsonl") == replayed_b,
            120,
            "a replayed from its mark at 9 and b from its mark at 14",
        )
        wait(lambda: _offsets(name, port) == at_end, 60, "both at the end again")
        assert stop(proc) == 0
        assert _seqs(out / "a.jsonl") == replayed_a and _seqs(out / "b.jsonl") == replayed_b, "once each"
        if fault == "mark dropped":
            logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("run-*.log"))
            assert "reading again from" in logs, "the dropped mark was read again"
    finally:
        stop(proc)
