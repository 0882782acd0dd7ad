"""The CLI's HTTP clients reach a worker or pipeline process on loopback directly, whatever
HTTP_PROXY says: before, with HTTP_PROXY set, their requests to 127.0.0.1 went through the
proxy, admin token included. A URL off loopback still goes through the proxy the environment
names. Two real HTTP servers on loopback stand for the process and the proxy."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.batch.client import BatchClient
from app.cli.pipeline_client import PipelineClient

TOKEN = "t" * 32


class _Seen(ThreadingHTTPServer):
    def __init__(self) -> None:
        self.paths: list[tuple[str, str]] = []  # (path as requested, Authorization)
        super().__init__(("127.0.0.1", 0), _Answer)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        assert isinstance(self.server, _Seen)
        self.server.paths.append((self.path, self.headers.get("Authorization", "")))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[_Seen, _Seen]]:
    process, proxy = _Seen(), _Seen()
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (process, proxy)]
    for thread in threads:
        thread.start()
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, proxy.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield process, proxy
    for s in (process, proxy):
        s.shutdown()
        s.server_close()


def test_the_pipeline_client_reaches_loopback_directly(servers: tuple[_Seen, _Seen]) -> None:
    process, proxy = servers
    assert PipelineClient(process.url, token=TOKEN).get("/pipelines") == {"ok": True}
    assert process.paths == [("/pipelines", f"Bearer {TOKEN}")] and proxy.paths == []


def test_the_pipeline_client_uses_the_proxy_off_loopback(servers: tuple[_Seen, _Seen]) -> None:
    _, proxy = servers
    assert PipelineClient("http://worker.invalid:8083").get("/pipelines") == {"ok": True}
    assert proxy.paths == [("http://worker.invalid:8083/pipelines", "")]


def test_the_batch_client_reaches_loopback_directly(servers: tuple[_Seen, _Seen]) -> None:
    process, proxy = servers
    with BatchClient(process.url, token=TOKEN, retry_for_s=1) as client:
        assert client.get_exact(1) == {"ok": True}
    assert len(process.paths) == 1 and process.paths[0][1] == f"Bearer {TOKEN}" and proxy.paths == []
