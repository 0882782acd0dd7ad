"""`hubstream stack up|down|status`: reuse, clear errors, and stopping only what it started."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cosmos import CosmosStore
from app.settings import Settings
from app.stack import stack_up
from app.stack.broker import broker_process
from app.stack.errors import MissingTool, PortHeldByOther, ServiceUnreachable
from app.stack.services import (
    LAUNCHER,
    _cosmos_server_module,
    cosmos_process,
    ensure_mysql_database,
    stack_down,
    table_dirs,
)
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def squatter() -> Iterator[int]:
    """A port held by a program that is neither Kafka nor Cosmos (accepts, never answers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4096)  # probes connect and are never accepted: keep the backlog from filling
        yield sock.getsockname()[1]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )


def test_stack_up_reuses_running_services(stack: Settings, tmp_path: Path) -> None:
    elsewhere = stack.model_copy(update={"home": tmp_path})
    report = stack_up(elsewhere)
    assert report.kafka.startswith("reused")
    assert report.cosmos.startswith("reused")
    assert report.mysql.startswith("ok")
    down = run_cli("stack", "down", HUBSTREAM_HOME=str(tmp_path))
    assert down.returncode == 0
    assert "stopped: nothing" in down.stdout
    assert broker_process(stack).healthy(), "stack down must not stop a broker it did not start"
    assert cosmos_process(stack).healthy()


def test_status_reports_each_service(stack: Settings) -> None:
    result = run_cli("stack", "status")
    assert result.returncode == 0
    assert '"kafka": "running' in result.stdout
    assert '"cosmos": "running' in result.stdout
    assert '"mysql": "ok' in result.stdout


def test_port_held_by_another_program_names_the_setting(
    stack: Settings, squatter: int, tmp_path: Path
) -> None:
    settings = stack.model_copy(update={"home": tmp_path, "embedded_cosmos_port": squatter})
    holder = rf"pid {os.getpid()} \(.*python.*\)"
    with pytest.raises(PortHeldByOther, match=f"127.0.0.1:{squatter} .*{holder}.*EMBEDDED_COSMOS_PORT"):
        cosmos_process(settings).start()
    result = run_cli("stack", "up", HUBSTREAM_HOME=str(tmp_path), EMBEDDED_BROKER_PORT=str(squatter))
    assert result.returncode == 1
    assert "EMBEDDED_BROKER_PORT" in result.stderr
    assert f"pid {os.getpid()} " in result.stderr, "the message names the program holding the port"


def test_missing_node_is_a_clear_error(
    stack: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingTool, match="node is not on PATH"):
        cosmos_process(stack)


def test_unreachable_mysql_names_mysql_url(stack: Settings) -> None:
    settings = stack.model_copy(update={"mysql_url": "mysql://root@127.0.0.1:1/hubstream"})
    with pytest.raises(ServiceUnreachable, match="MYSQL_URL"):
        ensure_mysql_database(settings)
    result = run_cli("stack", "up", MYSQL_URL="mysql://root@127.0.0.1:1/hubstream")
    assert result.returncode == 1
    assert "MYSQL_URL" in result.stderr


def test_mysql_database_is_created_when_missing(stack: Settings, unique: str) -> None:
    import pymysql

    settings = stack.model_copy(update={"mysql_url": f"mysql://root@127.0.0.1:3306/hs_{unique}"})
    assert ensure_mysql_database(settings).startswith("ok")
    conn = pymysql.connect(host="127.0.0.1", user="root")
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE %s", (f"hs_{unique}",))
            assert cur.fetchone() == (f"hs_{unique}",)
            cur.execute(f"DROP DATABASE `hs_{unique}`")
    finally:
        conn.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_up_starts_and_down_stops_its_own_services(stack: Settings, tmp_path: Path) -> None:
    """A second stack on other ports: started, recorded by pid files, answering, then stopped."""
    env = {
        "HUBSTREAM_HOME": str(tmp_path),
        "EMBEDDED_BROKER_PORT": str(_free_port()),
        "EMBEDDED_COSMOS_PORT": str(_free_port()),
    }
    up = run_cli("stack", "up", **env)
    assert up.returncode == 0, up.stderr
    assert '"kafka": "started' in up.stdout
    assert '"cosmos": "started' in up.stdout
    assert (tmp_path / "pids" / "broker.pid").is_file()
    assert (tmp_path / "logs" / "cosmos.log").is_file()
    again = run_cli("stack", "up", **env)
    assert '"kafka": "running' in again.stdout, "a second `up` reuses what the first started"
    down = run_cli("stack", "down", **env)
    assert down.returncode == 0
    assert "cosmos" in down.stdout
    assert "broker" in down.stdout
    assert not (tmp_path / "pids" / "broker.pid").exists()
    settings = stack.model_copy(
        update={
            "home": tmp_path,
            "embedded_broker_port": int(env["EMBEDDED_BROKER_PORT"]),
            "embedded_cosmos_port": int(env["EMBEDDED_COSMOS_PORT"]),
        }
    )
    assert not broker_process(settings).healthy()
    assert not cosmos_process(settings).healthy()


def test_embedded_cosmos_keeps_connections_alive(stack: Settings) -> None:
    """Two requests on one connection: the endpoint's own CLI closed each connection after one
    answer, so every SDK request paid a new TCP connection (and, over TLS, a handshake)."""
    if not stack.embedded_cosmos:
        pytest.fail("this test checks the embedded endpoint; unset COSMOS_ENDPOINT")
    conn = http.client.HTTPConnection("127.0.0.1", stack.embedded_cosmos_port, timeout=10)
    try:
        answers = []
        for _ in range(2):
            conn.request("GET", "/")
            response = conn.getresponse()
            response.read()
            answers.append((response.status, response.getheader("connection")))
            assert conn.sock is not None, "the endpoint closed the connection after one answer"
        assert [header for _, header in answers] == ["keep-alive", "keep-alive"]
    finally:
        conn.close()


def test_stack_down_forgets_the_tables_of_the_broker_it_stopped(stack: Settings, tmp_path: Path) -> None:
    """The embedded broker keeps topics in memory: tables left behind would stop the next workers
    (Faust: the stored offset is past the changelog's end)."""
    own = stack.model_copy(
        update={"home": tmp_path, "embedded_broker_port": free_port(), "embedded_cosmos_port": free_port()}
    )
    tables = [tmp_path / "data" / "worker-6066", tmp_path / "pipeline-mirror" / "data" / "worker-6076"]
    kept = tmp_path / "data" / "sample.parquet"
    for table in tables:
        (table / "v1").mkdir(parents=True)
    kept.write_bytes(b"sample")
    assert table_dirs(tmp_path) == sorted(tables)
    report = stack_up(own)
    assert report.kafka.startswith("started")
    assert stack_down(own) == ["cosmos", "broker"]
    assert [t for t in tables if t.exists()] == []
    assert kept.read_bytes() == b"sample"


async def test_embedded_cosmos_answers_a_query_with_a_partition_key_from_that_partition_only(
    stack: Settings, cosmos: CosmosStore
) -> None:
    """As Cosmos DB does: a query sent with a partition key sees only that partition's documents,
    even where its filter would match others. The package evaluated it over the whole collection
    (and so in time growing with everything stored beside the partition)."""
    if not stack.embedded_cosmos:
        pytest.fail("this test checks the embedded endpoint; unset COSMOS_ENDPOINT")
    container = await cosmos.container("scoped", "/pk")
    for pk in ("a", "b"):
        for n in range(3):
            await container.create_item({"id": f"{pk}{n}", "pk": pk, "n": n})
    sql = "SELECT c.id FROM c WHERE c.pk = @pk OR c.n >= 1 ORDER BY c.id"
    params: list[dict[str, object]] = [{"name": "@pk", "value": "a"}]
    found = [doc["id"] async for doc in container.query_items(sql, parameters=params, partition_key="a")]
    assert found == ["a0", "a1", "a2"]
    crossing = [
        doc["id"] async for doc in container.query_items("SELECT c.id FROM c WHERE c.n >= 1 ORDER BY c.id")
    ]
    assert crossing == ["a1", "a2", "b1", "b2"]  # without a partition key: every partition


async def test_embedded_cosmos_scoped_queries_follow_every_write_and_delete(
    stack: Settings, cosmos: CosmosStore
) -> None:
    """The endpoint answers a scoped query from an index of each partition's documents, built by
    the first such query and kept by every create, replace, upsert and delete after it: the
    answers are those of the documents as they are, in every partition."""
    if not stack.embedded_cosmos:
        pytest.fail("this test checks the embedded endpoint; unset COSMOS_ENDPOINT")
    container = await cosmos.container("scoped-writes", "/pk")
    live: dict[str, dict[str, int]] = {"a": {}, "b": {}}

    async def scoped(pk: str) -> dict[str, int]:
        sql = "SELECT c.id, c.n FROM c WHERE c.pk = @pk OR c.n >= 0"
        params: list[dict[str, object]] = [{"name": "@pk", "value": pk}]
        return {
            d["id"]: d["n"] async for d in container.query_items(sql, parameters=params, partition_key=pk)
        }

    for pk in live:
        for n in range(3):
            await container.create_item({"id": f"{pk}{n}", "pk": pk, "n": n})
            live[pk][f"{pk}{n}"] = n
    assert {pk: await scoped(pk) for pk in live} == live  # the index is built here
    await container.replace_item("a0", {"id": "a0", "pk": "a", "n": 10})
    live["a"]["a0"] = 10
    await container.delete_item("a1", partition_key="a")
    del live["a"]["a1"]
    await container.upsert_item({"id": "b9", "pk": "b", "n": 9})
    live["b"]["b9"] = 9
    await container.upsert_item({"id": "b0", "pk": "b", "n": 20})
    live["b"]["b0"] = 20
    for n in range(3):
        await container.delete_item(f"b{n}", partition_key="b")
        del live["b"][f"b{n}"]
    await container.create_item({"id": "a1", "pk": "a", "n": 11})  # an id again, after its delete
    live["a"]["a1"] = 11
    assert {pk: await scoped(pk) for pk in ("a", "b", "c")} == {**live, "c": {}}


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1"])
def test_embedded_cosmos_refuses_to_listen_beyond_loopback(host: str) -> None:
    """It speaks plain HTTP and accepts the emulator's published key: only on loopback."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH; `make install` installs the embedded stack's tools")
    done = subprocess.run(
        [node, str(LAUNCHER), str(_cosmos_server_module()), str(free_port()), host],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"loopback only, not on {host}" in done.stderr
