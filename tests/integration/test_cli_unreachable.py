"""CLI commands whose backing service does not answer end with one `error:` line naming it and exit
status 1, not a traceback (before, `hub` commands printed the Cosmos SDK's traceback and `consumer
members` the Kafka client's)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.ports import free_port

pytestmark = pytest.mark.integration

EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
BUNDLE = "00000000-0000-0000-0000-000000000001"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["hub", "depth", "--actor", "a1"], "error: Cosmos DB did not answer (ServiceRequestError"),
        (["hub", "peek", "--actor", "a1"], "error: Cosmos DB did not answer (ServiceRequestError"),
        (["hub", "dequeue", "--actor", "a1", "--bundle-id", BUNDLE], "error: Cosmos DB did not answer"),
        (["consumer", "members", "c1"], "error: Kafka failed the request"),
    ],
    ids=["hub-depth", "hub-peek", "hub-dequeue", "consumer-members"],
)
def test_a_command_whose_service_does_not_answer_says_so_in_one_line(args: list[str], said: str) -> None:
    closed = free_port()  # bound and released: nothing listens there
    env = {
        **os.environ,
        "COSMOS_ENDPOINT": f"http://127.0.0.1:{closed}/",
        "COSMOS_KEY": EMULATOR_KEY,
        "KAFKA_BOOTSTRAP": f"127.0.0.1:{closed}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(said), done.stderr[-2000:]
