"""The main flow on the durable embedded broker (EMBEDDED_BROKER_STORAGE=s3) while the broker is
SIGKILLed and started again three times: Spark's producers, both workers (their subscription
shards, batch table and changelogs), the mirror and the job's CLI all lose the broker and find it
again. Counted by what the consumers see: every actor drains each valid event once, FIFO per
cabinet, the batch completes and MySQL holds each row once."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from app.settings import Settings
from tests.reliability.mainflow import main_flow
from tests.reliability.test_main_flow_kill9 import batch_answers
from tests.support.durable_broker import durable_broker

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

EVENTS, RECIPIENTS, INVALID, RESTARTS = 96_000, 100, 8, 3
SEED = 20261203


@pytest.mark.timeout(1200)
def test_the_main_flow_survives_three_broker_restarts(stack: Settings, unique: str, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    with (
        durable_broker(tmp_path / "broker") as broker,
        main_flow(
            stack,
            unique,
            tmp_path,
            events=EVENTS,
            recipients=RECIPIENTS,
            invalid=INVALID,
            extra_env=broker.client_env(),
        ) as run,
    ):
        # A restart comes 2-6 s (seeded) after the workers answer for the run's batch again:
        # restarting before they found the broker again would only test the same outage twice.
        next_restart, settled = time.monotonic() + rng.uniform(2.0, 6.0), False
        while not run.ended_within(0.25):
            job_log = run.log()
            if broker.restarts >= RESTARTS or "drain the hub" in job_log:
                continue
            opened = re.search(r"batch (\d+) opened", job_log)
            settled = settled or (opened is not None and batch_answers(run.base_port, opened.group(1)))
            if not settled or time.monotonic() < next_restart:
                continue
            broker.restart()
            next_restart, settled = time.monotonic() + rng.uniform(2.0, 6.0), False
        counts = run.counts()
        print(f"broker restarts survived: {broker.restarts}; counts: {counts}")
        assert broker.restarts >= RESTARTS, "the flow finished before every restart"
        run.assert_consumers_saw_every_event_once(counts)
