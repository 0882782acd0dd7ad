"""Kafka security, end to end: a broker reachable only through TLS (tests/support/tls_broker.py),
and hubstream's processes configured with KAFKA_SECURITY_PROTOCOL=SSL and the broker's CA.

Every kind of Kafka client hubstream has is on this path: the CLI's admin and registry clients
(confluent-kafka), the worker's Faust app (aiokafka, through its credentials), the shard's own
aiokafka consumer and its confluent-kafka producers, and this test's composite producer. A client
left on PLAINTEXT would speak plaintext to the TLS port and never connect.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import get_settings
from tests.integration.subscription.conftest import Endpoint, Workers, assert_group_order, produce_groups
from tests.support.ports import free_port
from tests.support.tls_broker import tls_broker
from tests.support.waiting import async_wait_until

ROOT = Path(__file__).resolve().parents[3]
MESSAGES = 600
GROUPS = 20


def _hubstream(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.asyncio
async def test_a_worker_delivers_a_subscription_through_a_broker_that_speaks_only_tls(
    tmp_path: Path, unique: str, endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tls_broker(tmp_path / "tls") as broker, monkeypatch.context() as env:
        for name, value in broker.client_env().items():
            env.setenv(name, value)  # this process's own clients (the producer below) too
        get_settings.cache_clear()
        settings = get_settings()
        workers = Workers(tmp_path, f"tls-{unique}", settings)
        try:
            name = f"tls-{unique}"
            workers.cli("topic", "create", name, "--partitions", "2")
            workers.cli(
                "subscription", "create", name, "--topic", name, "--http", endpoint.url, "--shards", "2"
            )
            workers.start(free_port())
            produce_groups(settings, name, range(MESSAGES), GROUPS)
            await async_wait_until(
                lambda: sum(len(seqs) for seqs in endpoint.delivered.values()) >= MESSAGES,
                180,
                "every message delivered through the TLS broker",
            )
        finally:
            workers.stop_all()
            get_settings.cache_clear()
    assert_group_order(endpoint, range(MESSAGES), GROUPS)


def test_the_cli_refuses_a_broker_whose_certificate_its_ca_did_not_sign(tmp_path: Path) -> None:
    with tls_broker(tmp_path / "tls") as broker, tls_broker(tmp_path / "other") as other:
        env = {
            **os.environ,
            **broker.client_env(),
            "HUBSTREAM_HOME": str(tmp_path),
            "KAFKA_SSL_CA_LOCATION": str(other.ca),
        }
        refused = _hubstream(env, "topic", "list")
        assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
        trusted = _hubstream({**env, "KAFKA_SSL_CA_LOCATION": str(broker.ca)}, "topic", "list")
        assert trusted.returncode == 0, trusted.stderr
