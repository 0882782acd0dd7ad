"""Kafka security, end to end: the main job (`hubstream run`: the CLI and stack check, Spark's
executors producing, two Faust workers with their subscription shards, the hub and the MySQL
mirror) against a broker reachable only through TLS (tests/support/tls_broker.py), every process
configured with KAFKA_SECURITY_PROTOCOL=SSL and the broker's CA. A client left on PLAINTEXT would
speak plaintext to the TLS port and never connect, so the job would not end with its counts.
Also: a plaintext client, and a client trusting another CA, are refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings
from tests.reliability.mainflow import main_flow
from tests.support.tls_broker import self_signed, tls_broker

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
EVENTS, RECIPIENTS, INVALID = 20_000, 60, 6


@pytest.mark.timeout(900)
def test_the_main_job_runs_with_every_kafka_client_on_tls(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    with tls_broker(tmp_path / "tls") as broker:
        extra_env = broker.client_env()
        with main_flow(
            stack,
            unique,
            tmp_path,
            events=EVENTS,
            recipients=RECIPIENTS,
            invalid=INVALID,
            extra_env=extra_env,
        ) as run:
            assert run.ended_within(600), f"the job did not end:\n{run.log()[-3000:]}"
            run.assert_consumers_saw_every_event_once(run.counts())


def _topic_list(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", "topic", "list"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_plaintext_client_and_one_trusting_another_ca_are_refused(tmp_path: Path) -> None:
    with tls_broker(tmp_path / "tls") as broker:
        env = {**os.environ, **broker.client_env(), "HUBSTREAM_HOME": str(tmp_path)}
        other_ca, _ = self_signed(tmp_path, "other-ca")
        for refused_env in (
            {"KAFKA_SECURITY_PROTOCOL": "PLAINTEXT", "KAFKA_SSL_CA_LOCATION": ""},
            {"KAFKA_SSL_CA_LOCATION": str(other_ca)},
        ):
            answer = _topic_list({k: v for k, v in {**env, **refused_env}.items() if v})
            assert answer.returncode != 0 and "Traceback" not in answer.stderr, (refused_env, answer.stderr)
            assert "error:" in answer.stderr, answer.stderr
        trusted = _topic_list(env)
        assert trusted.returncode == 0, trusted.stderr
