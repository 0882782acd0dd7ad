"""A Spark standalone cluster on this machine, started from pyspark's own `spark-class`: one master
and one worker (1 core, 1 GiB), each a JVM of its own, as `--master spark://…` deployments run."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyspark

from tests.support.ports import free_port
from tests.support.spawn import spawn_logged, stop_processes
from tests.support.waiting import wait_until

__all__ = ["SparkCluster", "spark_cluster"]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


@dataclass(frozen=True)
class SparkCluster:
    master_url: str  # spark://127.0.0.1:PORT
    ui_url: str  # the master's web UI; /json/ is its state

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as answer:
            state: dict[str, Any] = orjson.loads(answer.read())
            return state


@contextmanager
def spark_cluster(folder: Path) -> Iterator[SparkCluster]:
    folder.mkdir(parents=True, exist_ok=True)
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder)}
    master = spawn_logged(
        [
            str(SPARK_CLASS),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        ],
        folder / "master.log",
        env=env,
    )
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}")
    worker = spawn_logged(
        [
            str(SPARK_CLASS),
            "org.apache.spark.deploy.worker.Worker",
            cluster.master_url,
            "--cores",
            "1",
            "--memory",
            "1g",
            "--webui-port",
            str(worker_ui),
            "--work-dir",
            str(folder / "work"),
        ],
        folder / "worker.log",
        env=env,
    )
    try:
        wait_until(
            lambda: any(w["state"] == "ALIVE" for w in cluster.state()["workers"]),
            120,
            "a Spark worker registered with the master",
            retry_on=(OSError,),
        )
        yield cluster
    finally:
        stop_processes(worker, master, grace_s=20)
