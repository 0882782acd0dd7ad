"""The main job across hosts (network namespaces, tests/support/hosts.py): the broker and the
Cosmos endpoint on one host (the root namespace's bridge address; the endpoint reached through
relays, tests/support/relay.py), a worker on each of two others, bound to every interface and
advertising its own address, and the job itself (`hubstream run --worker-url … --worker-url …`,
with Spark, the MySQL mirror and the actors) beside the services.

While the hub fills, with each worker running one of the subscription's two shards, the second
worker's link is cut (`ip link set … down`) for three session
timeouts and until the first worker runs every shard of the subscription (the group dropped the
cut worker, and the cut worker's shard leases ran out); then the link comes back and the cut
worker, still running, rejoins. The actors drain every event once, in order per cabinet;
the batch completes; the mirror holds every row once."""

from __future__ import annotations

import contextlib
import functools
import subprocess
import time
from pathlib import Path

import httpx
import pymysql
import pytest

from app.settings import Settings
from tests.reliability.mainflow import MainFlowRun
from tests.support.hosts import Host, lan
from tests.support.ports import free_port
from tests.support.relay import relay_argv
from tests.support.spawn import spawn_logged, stop_processes
from tests.support.tansu import start_tansu
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
EVENTS, RECIPIENTS, INVALID = 20_000, 60, 6
PORT = 6066  # the same on each host: each has its own network
ADMIN_TOKEN = "several-hosts-admin-token-0123456789abcdef"


def _listening(host: Host, port: int) -> bool:
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1).close()"
    done = subprocess.run(host.argv([PYTHON, "-c", probe]), capture_output=True, timeout=30)
    return done.returncode == 0


def _mirror_rows(unique: str) -> int:
    try:
        conn = pymysql.connect(host="127.0.0.1", user="root", database=f"rel_{unique}")
    except pymysql.err.OperationalError:
        return 0  # the job has not made its database yet
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM data_available")
            row = cur.fetchone()
            return int(row[0]) if row else 0
    except pymysql.err.ProgrammingError:
        return 0
    finally:
        conn.close()


def _shards_running(url: str, subscription: str) -> set[int]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    answer = httpx.get(f"{url}/subscriptions/shards", headers=headers, timeout=2.0).json()
    return {s["shard"] for s in answer["shards"] if s["subscription"] == subscription and s["running"]}


@pytest.mark.timeout(900)
def test_the_main_job_across_hosts_survives_a_worker_cut_off_past_its_session_timeout(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    with lan(2) as network, contextlib.ExitStack() as opened:
        gateway, workers_hosts = network.gateway, network.hosts
        broker_at = f"{gateway}:{free_port()}"
        broker = start_tansu(broker_at, broker_at, tmp_path / "broker.log")
        opened.callback(stop_processes, broker)
        cosmos = ("127.0.0.1", stack.embedded_cosmos_port)
        across = (gateway, free_port())
        relays = [spawn_logged(relay_argv(PYTHON, across, cosmos), tmp_path / "relay.log")]
        for host in workers_hosts:
            argv = host.argv(relay_argv(PYTHON, cosmos, across))
            relays.append(spawn_logged(argv, tmp_path / f"relay-{host.netns}.log"))
        opened.callback(stop_processes, *relays)
        for host in workers_hosts:
            relay_up = functools.partial(_listening, host, cosmos[1])
            wait_until(relay_up, 30, f"the Cosmos relay on {host.netns}")

        urls = tuple(f"http://{host.address}:{PORT}" for host in workers_hosts)
        run = MainFlowRun(
            stack,
            unique,
            tmp_path,
            EVENTS,
            RECIPIENTS,
            INVALID,
            extra_env={
                "KAFKA_BOOTSTRAP": broker_at,
                "KAFKA_BROKER_KIND": "embedded",
                # two slots for the two shards: the group gives each worker one, so the cut
                # worker holds a shard the other must take over
                "SUBSCRIPTION_SHARD_SLOTS": "2",
                "HUBSTREAM_ADMIN_TOKEN": ADMIN_TOKEN,
                "HUB_JWT_SECRET": f"several-hosts-jwt-secret-{unique}-{unique}",
            },
            worker_urls=urls,
        )
        opened.callback(run.cleanup)
        workers = []
        for host, url in zip(workers_hosts, urls, strict=True):
            home = tmp_path / host.netns
            home.mkdir()
            env = {**run.env, "HUBSTREAM_HOME": str(home), "WEB_HOST": "0.0.0.0", "WEB_PORT": str(PORT)}
            env["WEB_ADVERTISED_URL"] = url
            argv = host.argv([PYTHON, "-m", "app.cli.main", "worker", "--loglevel", "warn"])
            workers.append(spawn_logged(argv, home / "worker.log", cwd=ROOT, env=env))
        opened.callback(stop_processes, *workers)
        run.start()

        survivor, cut = urls[0], workers_hosts[1]
        subscription = f"hub-{unique}"
        wait_until(lambda: _mirror_rows(unique) >= 2_000, 300, "the flow under way (2,000 rows mirrored)")
        wait_until(
            lambda: all(len(_shards_running(url, subscription)) == 1 for url in urls),
            120,
            "each worker running one shard",
            retry_on=(httpx.HTTPError,),
        )
        cut_for_s = 3 * float(run.env["BROKER_SESSION_TIMEOUT_S"])  # the fault: how long it lasts at least
        cut.cut()
        cut_at = time.monotonic()
        try:
            wait_until(
                lambda: (
                    time.monotonic() - cut_at > cut_for_s
                    and _shards_running(survivor, subscription) == {0, 1}
                ),
                180,
                "the worker left on the network to run every shard",
                retry_on=(httpx.HTTPError,),
            )
        finally:
            cut.restore()
        assert run.job is not None and run.job.poll() is None, "the job ended before the link came back"
        assert run.ended_within(600), f"the job did not end:\n{run.log()[-3000:]}"
        for proc in workers:
            assert proc.poll() is None, "a worker died across the cut"
        run.assert_consumers_saw_every_event_once(run.counts())
