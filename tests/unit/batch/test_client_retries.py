"""The batch API client against a scripted HTTP server: what it retries and what it raises."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from app.batch.client import BatchClient
from app.batch.errors import BatchNotFound, PartitionNotReady
from app.errors import HubstreamError, InvalidInput
from tests.support.ports import free_port

Answer = tuple[int, bytes]


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next scripted answer (the last one repeats); keeps the
    Idempotency-Key of every request it saw."""

    def __init__(self, answers: list[Answer]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers
        self.keys: list[str | None] = []

    def next_answer(self) -> Answer:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class _Handler(BaseHTTPRequestHandler):
    server: Scripted

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.keys.append(self.headers.get("Idempotency-Key"))
        status, body = self.server.next_answer()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[type[Scripted]]:
    servers: list[Scripted] = []

    class Started(Scripted):
        def __init__(self, answers: list[Answer]) -> None:
            super().__init__(answers)
            servers.append(self)
            threading.Thread(target=self.serve_forever, daemon=True).start()

    yield Started
    for server in servers:
        server.shutdown()
        server.server_close()


def _url(server: Scripted) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _json(status: int, body: object) -> Answer:
    return status, orjson.dumps(body)


BATCH = {"batchId": 7, "isComplete": False, "isClosed": True}


def test_5xx_answers_are_retried_until_one_succeeds(serve: type[Scripted]) -> None:
    server = serve(
        [
            _json(503, {"reason": "partition recovering"}),
            _json(500, {"reason": "RuntimeError: boom"}),
            (502, b"<html>bad gateway</html>"),
            _json(200, BATCH),
        ]
    )
    with BatchClient(_url(server), retry_for_s=30) as client:
        assert client.get_exact(7) == BATCH
    assert len(server.keys) == 4


def test_a_retried_add_items_sends_the_same_idempotency_key(serve: type[Scripted]) -> None:
    server = serve([_json(503, {}), _json(200, {"batchItemGroupIds": [{"id": "g", "upto": 3}]})])
    with BatchClient(_url(server)) as client:
        groups = client.add_items(7, 3)
    assert [(g.id, g.upto) for g in groups] == [("g", 3)]
    assert server.keys[0] is not None and server.keys[0] == server.keys[1]


@pytest.mark.parametrize(
    ("status", "error"), [(400, InvalidInput), (404, BatchNotFound), (409, HubstreamError)]
)
def test_4xx_answers_raise_at_once(serve: type[Scripted], status: int, error: type[HubstreamError]) -> None:
    server = serve([_json(status, {"reason": "no such thing"}), _json(200, BATCH)])
    with BatchClient(_url(server), retry_for_s=30) as client, pytest.raises(error, match="no such thing"):
        client.get_exact(7)
    assert len(server.keys) == 1


def test_a_lasting_503_raises_partition_not_ready_once_the_retry_time_passed(serve: type[Scripted]) -> None:
    server = serve([_json(503, {"reason": "still recovering"})])
    with (
        BatchClient(_url(server), retry_for_s=0.5) as client,
        pytest.raises(PartitionNotReady, match="recovering"),
    ):
        client.get_exact(7)
    assert len(server.keys) >= 2


def test_a_lasting_500_raises_its_reason(serve: type[Scripted]) -> None:
    server = serve([_json(500, {"reason": "RuntimeError: boom"})])
    with BatchClient(_url(server), retry_for_s=0.3) as client, pytest.raises(HubstreamError, match="boom"):
        client.get_exact(7)


def test_nobody_listening_is_partition_not_ready() -> None:
    with (
        BatchClient(f"http://127.0.0.1:{free_port()}", retry_for_s=0.3) as client,
        pytest.raises(PartitionNotReady, match="unreachable"),
    ):
        client.get_exact(7)
