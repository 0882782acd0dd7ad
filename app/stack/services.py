"""The embedded stack: Tansu broker, the Cosmos DB endpoint, and the MySQL check.

`stack_up` starts what is not configured externally and returns once every service answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pymysql

from app.settings import MysqlTarget, Settings
from app.stack.broker import broker_process, kafka_answers, s3_process, start_broker, stop_broker
from app.stack.errors import MissingTool, ServiceDidNotStart, ServiceUnreachable
from app.stack.process import ManagedProcess, port_open

__all__ = [
    "StackReport",
    "cosmos_process",
    "ensure_mysql_database",
    "mariadb_process",
    "stack_down",
    "stack_status",
    "stack_up",
    "start_mariadb",
    "start_workers",
    "table_dirs",
    "url_answers",
    "web_answers",
    "worker_process",
    "worker_processes",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = Path(__file__).with_name("embedded_cosmos.js")  # the endpoint with keep-alive


@dataclass(frozen=True)
class StackReport:
    kafka: str
    cosmos: str
    mysql: str
    binlog: str

    def as_dict(self) -> dict[str, str]:
        return {"kafka": self.kafka, "cosmos": self.cosmos, "mysql": self.mysql, "binlog": self.binlog}


def _cosmos_answers(url: str, attempts: int = 3) -> bool:
    """Whether the embedded endpoint answers HTTP (plain, on loopback); its single Node process can
    be slow under load, so a timeout is tried again before we conclude it is not there."""
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=5):
                return True
        except urllib.error.HTTPError:
            return True  # it answered HTTP, which is all "alive" means here
        except TimeoutError:
            continue
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(getattr(exc, "reason", None), TimeoutError) and attempt + 1 < attempts:
                continue
            return False
    return False


def _cosmos_server_module() -> Path:
    for root in (Path.cwd(), PROJECT_ROOT):
        script = root / "node_modules" / "@vercel" / "cosmosdb-server" / "lib" / "index.js"
        if script.is_file():
            return script
    raise MissingTool(
        "the embedded Cosmos DB endpoint (@vercel/cosmosdb-server) is not installed; run `make install` "
        "(npm ci) or set COSMOS_ENDPOINT and COSMOS_KEY to use a real Cosmos DB"
    )


def cosmos_process(settings: Settings) -> ManagedProcess:
    node = shutil.which("node")
    if node is None:
        raise MissingTool("node is not on PATH; install Node.js 20 or set COSMOS_ENDPOINT/COSMOS_KEY")
    port = settings.embedded_cosmos_port
    return ManagedProcess(
        name="cosmos",
        argv=[node, str(LAUNCHER), str(_cosmos_server_module()), str(port), "127.0.0.1"],
        home=settings.home,
        healthy=lambda: _cosmos_answers(settings.cosmos_url),
        port=port,
        setting_hint="EMBEDDED_COSMOS_PORT (or COSMOS_ENDPOINT/COSMOS_KEY to use a real Cosmos DB)",
    )


def _mariadb_answers(settings: Settings) -> bool:
    target = settings.binlog_mysql
    try:
        conn = pymysql.connect(**target.connect_args(database="", connect_timeout=2))
    except pymysql.MySQLError:
        return False
    conn.close()
    return True


def _mariadb_bin(name: str) -> str:
    for found in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if found and Path(found).is_file():
            return found
    raise MissingTool(
        f"{name} is not installed: binlog capture needs MariaDB's server (run `make install`, which "
        "installs Debian's mariadb-server) or set BINLOG_MYSQL_URL to a server with a row-based binlog"
    )


def mariadb_process(settings: Settings) -> ManagedProcess:
    """The project's own MariaDB with a row-based binlog, for the `binlog` pipeline reader."""
    base = (settings.home / "mariadb").resolve()
    argv = [
        _mariadb_bin("mariadbd"),
        "--no-defaults",
        f"--datadir={base / 'data'}",
        f"--socket={base / 'mariadb.sock'}",
        f"--pid-file={base / 'mariadb.pid'}",
        f"--port={settings.embedded_mariadb_port}",
        "--bind-address=127.0.0.1",
        "--skip-name-resolve",
        "--server-id=1",
        "--log-bin=binlog",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--binlog-row-metadata=FULL",  # column names in the binlog: capture survives ALTER TABLE
        "--innodb-buffer-pool-size=64M",
        "--character-set-server=utf8mb4",
    ]
    if os.geteuid() == 0:
        argv.append("--user=root")  # mariadbd refuses to run as root unless told to
    return ManagedProcess(
        name="mariadb",
        argv=argv,
        home=settings.home,
        healthy=lambda: _mariadb_answers(settings),
        port=settings.embedded_mariadb_port,
        setting_hint="EMBEDDED_MARIADB_PORT (or BINLOG_MYSQL_URL to capture from a running server)",
        start_timeout_s=60.0,
    )


def _init_mariadb_datadir(settings: Settings) -> None:
    data = (settings.home / "mariadb" / "data").resolve()
    if (data / "mysql").is_dir():
        return
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        _mariadb_bin("mariadb-install-db"),
        "--no-defaults",
        f"--datadir={data}",
        "--auth-root-authentication-method=normal",  # root over TCP on loopback, no password
        "--skip-test-db",
    ]
    if os.geteuid() == 0:
        argv.append("--user=root")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)
        raise ServiceDidNotStart(f"mariadb-install-db failed ({done.returncode}): {done.stderr[-2000:]}")


def start_mariadb(settings: Settings) -> str:
    """Start (or reuse) the binlog MariaDB when BINLOG_MYSQL_URL is unset; check it either way."""
    if settings.embedded_mariadb:
        process = mariadb_process(settings)
        if not process.healthy():
            _init_mariadb_datadir(settings)
        state = f"{process.start()} (embedded MariaDB at 127.0.0.1:{settings.embedded_mariadb_port})"
    else:
        state = f"external ({settings.binlog_mysql.redacted()})"
    check_binlog_server(settings.binlog_mysql)
    return state


def check_binlog_server(target: MysqlTarget) -> None:
    """Fail with the server setting to change when it cannot serve a row-based binlog."""
    try:
        conn = pymysql.connect(**target.connect_args(database="", connect_timeout=5))
    except pymysql.MySQLError as exc:
        raise ServiceUnreachable(f"binlog server {target.redacted()} does not answer ({exc})") from exc
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin, @@binlog_format")
            log_bin, binlog_format = cur.fetchone() or (0, "")
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{target.database}` CHARACTER SET utf8mb4")
        conn.commit()
    finally:
        conn.close()
    if not log_bin or str(binlog_format).upper() != "ROW":
        raise ServiceUnreachable(
            f"binlog server {target.redacted()}: log_bin={log_bin}, binlog_format={binlog_format}; "
            "binlog capture needs log_bin=ON and binlog_format=ROW (set them in the server's config and "
            "restart it) or leave BINLOG_MYSQL_URL unset to use the embedded MariaDB"
        )


def ensure_mysql_database(settings: Settings) -> str:
    target = settings.mysql
    try:
        conn = pymysql.connect(**target.connect_args(database="", connect_timeout=5))
    except pymysql.MySQLError as exc:
        raise ServiceUnreachable(
            f"MySQL at {target.redacted()} does not answer ({exc.args[-1] if exc.args else exc}); "
            "start MariaDB/MySQL or set MYSQL_URL"
        ) from exc
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{target.database}` CHARACTER SET utf8mb4")
        conn.commit()
    finally:
        conn.close()
    return f"ok ({target.redacted()})"


def _require_java() -> None:
    if shutil.which("java") is None:
        raise MissingTool("java is not on PATH; Spark ingest needs Java 17 (set JAVA_HOME or install it)")


def stack_up(settings: Settings) -> StackReport:
    _require_java()
    if settings.embedded_kafka:
        kafka = start_broker(settings)
    elif kafka_answers(settings.bootstrap):
        kafka = f"external ({settings.bootstrap})"
    else:
        raise ServiceUnreachable(f"Kafka at KAFKA_BOOTSTRAP={settings.bootstrap} does not answer")
    if settings.embedded_cosmos:
        cosmos = f"{cosmos_process(settings).start()} (embedded endpoint at {settings.cosmos_url})"
    else:
        cosmos = f"external ({settings.cosmos_url})"
    return StackReport(
        kafka=kafka, cosmos=cosmos, mysql=ensure_mysql_database(settings), binlog=start_mariadb(settings)
    )


def web_answers(host: str, port: int) -> bool:
    return port_open(host, port) and url_answers(f"http://{host}:{port}/")


def url_answers(url: str) -> bool:
    """Does an HTTP server answer at `url` (with any status)?"""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def worker_process(settings: Settings, index: int) -> ManagedProcess:
    """Background worker number `index` (1-based) on WEB_PORT + index - 1."""

    port = settings.web_port + index - 1
    host = "127.0.0.1" if settings.web_host in ("0.0.0.0", "127.0.0.1", "localhost") else settings.web_host
    return ManagedProcess(
        name=f"worker-{index}",
        argv=[sys.executable, "-m", "app.cli.main", "worker", "--loglevel", "warn"],
        home=settings.home,
        healthy=lambda: web_answers(host, port),
        port=port,
        host=host,
        setting_hint="WEB_PORT",
        env={"WEB_PORT": str(port), "HUBSTREAM_HOME": str(settings.home)},
        start_timeout_s=120.0,
    )


def start_workers(settings: Settings, count: int) -> list[str]:
    """Start `count` background workers (or reuse running ones); return their states."""
    return [f"worker-{i}: {worker_process(settings, i).start()}" for i in range(1, count + 1)]


def worker_processes(settings: Settings) -> list[ManagedProcess]:
    """Workers and pipelines hubstream started (recorded by pid file), for status and stop."""
    pids = settings.home / "pids"
    names = (
        sorted(p.stem for p in pids.glob("*.pid") if p.stem not in ("broker", "s3", "cosmos", "mariadb"))
        if pids.is_dir()
        else []
    )
    return [ManagedProcess(name=n, argv=[], home=settings.home, healthy=lambda: False) for n in names]


def stack_down(settings: Settings) -> list[str]:
    stopped = [w.name for w in worker_processes(settings) if w.stop()]
    if settings.embedded_cosmos and cosmos_process(settings).stop():
        stopped.append("cosmos")
    if settings.embedded_mariadb and mariadb_process(settings).stop(timeout_s=30.0):
        stopped.append("mariadb")  # its datadir stays: a binlog position stored by a pipeline stays valid
    if settings.embedded_kafka and (broker := stop_broker(settings)):
        stopped.extend(broker)
        # The embedded broker's topics end with it (or with its S3 server): the workers' tables,
        # whose changelogs were those topics, would refuse to start against the next broker
        # (Faust's ConsistencyError: the stored offset is past the changelog's end).
        for table_dir in table_dirs(settings.home):
            shutil.rmtree(table_dir, ignore_errors=True)
    return stopped


def table_dirs(home: Path) -> list[Path]:
    """The local table stores of the workers and pipeline processes started under `home`."""
    return sorted([*home.glob("data/worker-*"), *home.glob("*/data/worker-*")])


def stack_status(settings: Settings) -> dict[str, str]:
    status = {
        "kafka": broker_process(settings).status()
        if settings.embedded_kafka
        else ("external, answering" if kafka_answers(settings.bootstrap) else "external, NOT answering"),
        "cosmos": cosmos_process(settings).status()
        if settings.embedded_cosmos
        else f"external ({settings.cosmos_url})",
    }
    try:
        status["mysql"] = ensure_mysql_database(settings)
    except ServiceUnreachable as exc:
        status["mysql"] = str(exc)
    status["binlog"] = (
        mariadb_process(settings).status()
        if settings.embedded_mariadb
        else f"external ({settings.binlog_mysql.redacted()})"
    )
    if settings.embedded_kafka and settings.embedded_broker_storage == "s3":
        status["s3"] = s3_process(settings).status()
    for worker in worker_processes(settings):
        status[worker.name] = "running" if worker.owned_pid() else "stopped"
    return status
