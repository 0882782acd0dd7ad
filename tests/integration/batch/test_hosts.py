"""Workers on two hosts (network namespaces, tests/support/hosts.py), each bound to every interface
on the same port and advertising its own address (WEB_ADVERTISED_URL), as containers or machines
of a deployment do. A request reaching either host is served by the owner of the batch's
partition: the worker forwards it to the URL its peer advertised. Workers used to advertise their
bind address (`http://0.0.0.0:6066`), so a forwarded request went back to the caller itself and
was answered 503 for good."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from app.batch.client import BatchClient
from app.settings import Settings
from tests.integration.batch.conftest import PARTITIONS, BatchWorker, wait_serving, worker_env
from tests.support.hosts import Host, lan
from tests.support.ports import free_port
from tests.support.spawn import spawn_logged
from tests.support.tansu import start_tansu

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[3]
PORT = 6066  # the same on each host: each has its own network
ADMIN_TOKEN = "hosts-test-admin-token-0123456789abcdef"


def start_on(host: Host, env: dict[str, str], home: Path) -> BatchWorker:
    url = f"http://{host.address}:{PORT}"
    home.mkdir(parents=True, exist_ok=True)
    env = {**env, "HUBSTREAM_HOME": str(home), "WEB_HOST": "0.0.0.0", "WEB_PORT": str(PORT)}
    env["WEB_ADVERTISED_URL"] = url
    argv = host.argv([str(ROOT / ".venv" / "bin" / "python"), "-m", "tests.support.run_worker"])
    proc = spawn_logged(argv, home / "worker.log", cwd=ROOT, env=env)
    return BatchWorker(proc, url, home, env)


def test_a_request_to_either_host_is_served_by_the_owner_of_its_batch(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    with lan(2) as network, contextlib.ExitStack() as opened:
        broker_at = f"{network.gateway}:{free_port()}"
        broker = start_tansu(broker_at, broker_at, tmp_path / "broker.log")
        opened.callback(broker.wait, 10)
        opened.callback(broker.terminate)
        env = worker_env(
            stack,
            unique,
            KAFKA_BOOTSTRAP=broker_at,
            KAFKA_BROKER_KIND="embedded",
            HUBSTREAM_ADMIN_TOKEN=ADMIN_TOKEN,
            HUB_JWT_SECRET=f"hosts-test-jwt-secret-{unique}-{unique}",
        )
        workers = [start_on(host, env, tmp_path / host.netns) for host in network.hosts]
        for worker in workers:
            opened.callback(worker.stop)
        wait_serving(workers, timeout_s=120)
        a, b = workers
        served = {w.url: set(w.status()["partitionsServed"]) for w in workers}
        via_a = opened.enter_context(BatchClient(a.url, token=ADMIN_TOKEN, retry_for_s=15))
        via_b = opened.enter_context(BatchClient(b.url, token=ADMIN_TOKEN, retry_for_s=15))

        batch_of_b = via_b.create_exact(user_key="on-b")
        assert batch_of_b % PARTITIONS in served[b.url] and batch_of_b % PARTITIONS not in served[a.url]
        items = via_a.add_item_ids(batch_of_b, 50)  # forwarded by a to b's advertised URL
        assert via_a.close_exact(batch_of_b) is False
        assert via_a.ack(items) == [{"batchId": batch_of_b, "userKey": "on-b"}]
        assert via_a.get_exact(batch_of_b)["isComplete"] is True

        batch_of_a = via_a.create_exact(user_key="on-a")
        assert batch_of_a % PARTITIONS in served[a.url]
        assert via_b.get_exact(batch_of_a)["userKey"] == "on-a"  # and the other way round
