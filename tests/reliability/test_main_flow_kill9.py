"""Kill -9 a worker every few seconds while the main flow runs (Spark ingest under a batch ->
subscription -> Cosmos hub + MySQL mirror). At the end the hub holds exactly the valid input
events, none twice, the batch is complete and MySQL holds the same rows."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pymysql
import pytest

from app.cosmos import open_cosmos
from app.settings import Settings
from app.stack.process import port_open, read_pid
from app.stack.services import worker_process

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

EVENTS, RECIPIENTS, INVALID = 12_000, 150, 12
# A worker restart plus the consumer-group rebalance takes ~10-15 s here, longer on a busy machine;
# killing again before the group has settled only livelocks it. So: at most MAX_KILLS kills, each
# at least 15 s after the previous restart and only once the job has read the batch's progress
# again since then (the batch table answers only when its partitions are recovered).
KILL_EVERY_S = 15.0
MAX_KILLS = 4


def _free_base_port() -> int:
    rng = random.Random()
    while True:
        base = rng.randrange(7000, 7900, 20)
        if not any(port_open("127.0.0.1", base + offset) for offset in (0, 1, 10)):
            return base


def _env(stack: Settings, unique: str, home: Path, base_port: int) -> dict[str, str]:
    return {
        **os.environ,
        "HUBSTREAM_HOME": str(home),
        "WEB_PORT": str(base_port),
        "HUBSTREAM_APP_ID": f"rel-{unique}",
        "SUBSCRIPTION_REGISTRY_TOPIC": f"__subs-rel-{unique}",
        "COSMOS_DATABASE": f"rel-{unique}",
        "MYSQL_URL": f"mysql://root@127.0.0.1:3306/rel_{unique}",
        "BROKER_SESSION_TIMEOUT_S": "6",
        "BROKER_REBALANCE_TIMEOUT_S": "6",
    }


def _cleanup(stack: Settings, env: dict[str, str], unique: str) -> None:
    subprocess.run([sys.executable, "-m", "app.cli.main", "stack", "down"], env=env, timeout=120, check=False)
    conn = pymysql.connect(host="127.0.0.1", user="root")
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `rel_{unique}`")
    finally:
        conn.close()

    async def drop_cosmos() -> None:
        store = await open_cosmos(stack, database=f"rel-{unique}")
        try:
            await store.client.delete_database(store.database.id)
        finally:
            await store.close()

    asyncio.run(drop_cosmos())


def test_main_flow_survives_kill9_of_workers(stack: Settings, unique: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    base = _free_base_port()
    env = _env(stack, unique, home, base)
    worker_settings = stack.model_copy(update={"home": home, "web_port": base})
    args = ["--events", str(EVENTS), "--recipients", str(RECIPIENTS), "--invalid", str(INVALID)]
    args += ["--topic", f"da-{unique}", "--subscription", f"hub-{unique}", "--timeout-s", "600"]
    err_path = tmp_path / "run.err"
    with open(err_path, "wb") as err:
        job = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "run", *args], env=env, stdout=subprocess.PIPE, stderr=err
        )
    kills: list[str] = []
    try:
        next_kill = time.monotonic() + KILL_EVERY_S
        progress_at_restart = 0
        while job.poll() is None:
            time.sleep(0.5)
            job_log = err_path.read_text(errors="replace")
            # Stop killing once the flow is drained and the job reads back and peeks over HTTP.
            if len(kills) >= MAX_KILLS or "reading back" in job_log:
                continue
            if time.monotonic() < next_kill or job_log.count("complete=False") <= progress_at_restart:
                continue
            victim = len(kills) % 2 + 1
            pid = read_pid(home / "pids" / f"worker-{victim}.pid")
            if pid is None:
                continue
            os.kill(pid, signal.SIGKILL)
            kills.append(f"worker-{victim}")
            with pytest.MonkeyPatch.context() as patch:  # the restarted worker gets this run's settings
                for name in (
                    "HUBSTREAM_APP_ID",
                    "SUBSCRIPTION_REGISTRY_TOPIC",
                    "COSMOS_DATABASE",
                    "MYSQL_URL",
                ):
                    patch.setenv(name, env[name])
                patch.setenv("BROKER_SESSION_TIMEOUT_S", "6")
                patch.setenv("BROKER_REBALANCE_TIMEOUT_S", "6")
                worker_process(worker_settings, victim).start()
            next_kill = time.monotonic() + KILL_EVERY_S
            progress_at_restart = err_path.read_text(errors="replace").count("complete=False")
        out = job.stdout.read().decode() if job.stdout else ""
        log = err_path.read_text(errors="replace")
        assert job.returncode == 0, log[-4000:]
        counts = orjson.loads(out.strip().splitlines()[-1])
        assert len(kills) >= 2, f"the flow finished before enough kills: {kills}"
        valid = EVENTS - INVALID
        assert counts["events_in"] == EVENTS
        assert counts["rejected"] == INVALID
        assert counts["produced"] == valid
        assert counts["dead_lettered"] == 0
        assert counts["delivered"] == valid
        assert counts["hub_saved"] == valid, "every valid event visible once to actors: no loss, no duplicate"
        assert counts["mysql_rows"] == valid
        assert counts["batch_complete"] is True
    finally:
        if job.poll() is None:
            job.kill()
        _cleanup(stack, env, unique)
