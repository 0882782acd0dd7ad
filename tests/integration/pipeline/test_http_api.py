"""The pipeline process's HTTP API on a live `hubstream pipeline run` (JSON-lines reader following its
file -> two JSON-lines writers), with the admin token set: list, status, pause (the paused writer's
file stops growing while the other writer takes new lines), step, mark, log range, resume (the rest
arrives in order), offsets, and the 4xx answers with JSON reasons. The sinks are read as files."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from faust.web.drivers.aiohttp import Web as AiohttpWeb

from agents import build_worker
from app.pipeline.api_models import pipeline_openapi_document
from app.settings import Settings

from .support import free_port, start, stop, wait

pytestmark = pytest.mark.integration

TOKEN = f"pipe-admin-{uuid.uuid4().hex}"


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = TOKEN, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                assert response.headers["Content-Type"].startswith("application/json")
                return response.status, orjson.loads(response.read())
        except urllib.error.HTTPError as exc:
            assert exc.headers["Content-Type"].startswith("application/json"), exc
            return exc.code, orjson.loads(exc.read())

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(method, path, body)
        assert status == 200, (method, path, status, answer)
        return answer

    def running(self, name: str) -> bool:
        try:
            status, answer = self.call("GET", "/pipelines")
        except OSError:
            return False
        return status == 200 and answer["pipelines"][0]["state"] == "running"


def _lines(first: int, last: int) -> bytes:
    return b"".join(orjson.dumps({"id": f"d{i}", "seq": i}) + b"\n" for i in range(first, last))


def _seqs(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [orjson.loads(line)["data"]["seq"] for line in path.read_bytes().splitlines()]


def _error(answer: tuple[int, Any], status: int, error: str, reason: str) -> None:
    assert answer[0] == status, answer
    assert answer[1]["error"] == error and reason in answer[1]["reason"], answer


@pytest.mark.timeout(300)
def test_http_api_on_a_live_pipeline(stack: Settings, unique: str, tmp_path: Path) -> None:
    name = f"api-{unique}"
    source, out = tmp_path / "in.jsonl", tmp_path / "out"
    source.write_bytes(_lines(0, 20))  # offsets 0-19, then 20 = copy Complete
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: {name}\nbatch_size: 5\nbatch_wait_s: 0.05\n"
        f"reader: {{type: jsonl, path: {source}, namespace: docs, follow: true, poll_s: 0.1}}\n"
        "writers:\n"
        f"  - {{name: file, type: jsonl, path: {out / 'file.jsonl'}}}\n"
        f"  - {{name: mirror, type: jsonl, path: {out / 'mirror.jsonl'}}}\n"
    )
    port = free_port()
    api = Api(port)
    proc = start(file, tmp_path, port, HUBSTREAM_ADMIN_TOKEN=TOKEN)
    base = f"/pipelines/{name}"
    try:
        wait(lambda: api.running(name), 90, "the pipeline process running")
        listed = api.ok("GET", "/pipelines")["pipelines"]
        assert [(p["name"], p["state"], sorted(w["name"] for w in p["writers"])) for p in listed] == [
            (name, "running", ["file", "mirror"])
        ]

        def caught_up(*writers: str) -> bool:
            report = api.ok("GET", f"{base}/status")
            end = report["commitLog"]["endOffset"]
            chosen = writers or tuple(report["writers"])
            return end > 0 and all(report["writers"][w]["offset"] == end - 1 for w in chosen)

        wait(lambda: _seqs(out / "file.jsonl") == list(range(20)) and caught_up(), 60, "the copy written")
        report = api.ok("GET", f"{base}/status")
        assert report["reader"]["docs"]["mode"] == "complete" and report["readerError"] is None
        assert {n: (w["state"], w["lag"], w["lastError"]) for n, w in report["writers"].items()} == {
            "file": ("running", 0, None),
            "mirror": ("running", 0, None),
        }

        # pause: file stops; new lines reach mirror only
        paused = api.ok("POST", f"{base}/writers/file/pause")
        assert (paused["state"], paused["changed"], paused["stopped"]) == ("paused", True, True)
        at_pause = paused["offset"]
        with source.open("ab") as handle:
            handle.write(_lines(20, 40))
        wait(lambda: _seqs(out / "mirror.jsonl") == list(range(40)) and caught_up("mirror"), 60, "mirror")
        assert _seqs(out / "file.jsonl") == list(range(20)), "a paused writer must not write"
        report = api.ok("GET", f"{base}/status")
        end = report["commitLog"]["endOffset"]
        assert report["writers"]["file"]["state"] == "paused"
        assert report["writers"]["file"]["offset"] == at_pause and report["writers"]["file"]["lag"] > 0
        assert api.ok("POST", f"{base}/writers/file/pause")["changed"] is False  # already paused

        # the log between the pause and the end: seq 20..39
        view = api.ok("GET", f"{base}/log?from={at_pause + 1}&to={end - 1}")
        assert (view["from"], view["to"], view["endOffset"]) == (at_pause + 1, end - 1, end)
        entries = view["entries"]
        assert [e["value"]["data"]["seq"] for e in entries] == list(range(20, 40))
        assert [e["offset"] for e in entries] == list(range(at_pause + 1, end))
        assert {(e["key"], e["mode"], e["value"]["op"]) for e in entries} == {("docs", "sync", "insert")}

        # step writes exactly the next entry (seq 20) to the paused writer's file
        _error(api.call("POST", f"{base}/writers/mirror/step"), 409, "WriterBusy", "pause it")
        stepped = api.ok("POST", f"{base}/writers/file/step")
        assert (stepped["stepped"], stepped["ok"], stepped["offset"]) == (at_pause + 1, True, at_pause + 1)
        assert stepped["state"] == "paused"
        assert _seqs(out / "file.jsonl") == list(range(21))

        # mark seq 21 acknowledged without writing it
        marked = api.ok("POST", f"{base}/writers/file/offset", {"offset": at_pause + 2})
        assert (marked["offset"], marked["state"]) == (at_pause + 2, "paused")
        assert _seqs(out / "file.jsonl") == list(range(21))

        # resume: the rest arrives in order, nothing else skipped
        resumed = api.ok("POST", f"{base}/writers/file/resume")
        assert resumed["changed"] is True
        expected = [*range(21), *range(22, 40)]
        wait(lambda: _seqs(out / "file.jsonl") == expected and caught_up(), 60, "file after the resume")
        offsets = api.ok("GET", f"{base}/offsets")
        assert offsets["endOffset"] == end
        assert {n: w["offset"] for n, w in offsets["writers"].items()} == {"file": end - 1, "mirror": end - 1}
        assert offsets["readers"]["docs"]["logOffset"] == end - 1
        assert offsets["readers"]["docs"]["mode"] == "sync"
        assert api.ok("GET", f"{base}/status")["writers"]["file"]["state"] == "running"

        # the pipeline-level pause and resume
        assert sorted(api.ok("POST", f"{base}/pause")["paused"]) == ["file", "mirror"]
        assert sorted(api.ok("POST", f"{base}/resume")["resumed"]) == ["file", "mirror"]

        # 4xx with JSON reasons
        _error(api.call("GET", "/pipelines/nope/status"), 404, "UnknownPipeline", "nope")
        _error(api.call("POST", f"{base}/writers/nope/pause"), 404, "UnknownWriter", "nope")
        _error(api.call("POST", f"{base}/writers/nope/step"), 404, "UnknownWriter", "nope")
        _error(
            api.call("POST", f"{base}/writers/file/offset", {"offset": end}), 400, "InvalidInput", "outside"
        )
        _error(
            api.call("POST", f"{base}/writers/file/offset", {"offset": -2}), 400, "InvalidInput", "outside"
        )
        _error(
            api.call("POST", f"{base}/writers/file/offset", {"offset": "3"}), 400, "InvalidInput", "integer"
        )
        _error(
            api.call("POST", f"{base}/writers/file/offset", {"offset": True}), 400, "InvalidInput", "integer"
        )
        _error(api.call("POST", f"{base}/writers/file/offset", [3]), 400, "InvalidInput", '{"offset": N}')
        _error(api.call("POST", f"{base}/writers/file/offset", raw=b"{"), 400, "InvalidInput", "JSON")
        _error(api.call("GET", f"{base}/log?from=5&to=1005"), 400, "InvalidInput", "at most 1000")
        _error(api.call("GET", f"{base}/log?from=-1"), 400, "InvalidInput", "0 <= from")
        _error(api.call("GET", f"{base}/log?from=3&to=2"), 400, "InvalidInput", "0 <= from")
        _error(api.call("GET", f"{base}/log?from=x"), 400, "InvalidInput", "not an integer")
        _error(api.call("GET", f"{base}/nothing"), 404, "NotFound", "GET")
        # the admin token guards changes and the commit-log view (it shows the documents)
        _error(api.call("POST", f"{base}/writers/file/pause", token=None), 401, "Unauthorized", "admin token")
        _error(api.call("GET", f"{base}/log", token=None), 401, "Unauthorized", "token")
        _error(api.call("POST", f"{base}/resume", token="wrong"), 401, "Unauthorized", "admin token")
        # reads need a token too once an admin token is set; /metrics stays open
        _error(api.call("GET", f"{base}/status", token=None), 401, "Unauthorized", "needs a token")
        with urllib.request.urlopen(api.base + "/metrics", timeout=30) as scraped:
            text = scraped.read().decode()
        name = base.rsplit("/", 1)[-1]
        assert f'hubstream_pipeline_writer_lag_records{{pipeline="{name}",writer="file"}} 0.0' in text, text
        assert f'hubstream_pipeline_commit_log_end_offset{{pipeline="{name}"}} {float(end)}' in text, text
        assert "process_cpu_seconds_total" in text and "hubstream_build_info{" in text
        assert api.ok("GET", "/openapi.json") == orjson.loads(orjson.dumps(pipeline_openapi_document()))
        assert _seqs(out / "file.jsonl") == expected, "nothing written by the refused calls"
        assert stop(proc) == 0
    finally:
        stop(proc)


def test_document_matches_the_pipeline_route_table(stack: Settings, tmp_path: Path) -> None:
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        "name: routes\n"
        f"reader: {{type: jsonl, path: {tmp_path / 'in.jsonl'}}}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {tmp_path / 'out.jsonl'}}}\n"
    )
    settings = stack.model_copy(
        update={"home": tmp_path, "app_id": f"routes-{uuid.uuid4().hex[:10]}", "pipeline_file": file}
    )
    app = build_worker(settings, ["pipelines"]).app
    app.web.init_server()
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in cast(AiohttpWeb, app.web).web_app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    documented = {
        (method, path) for path, methods in pipeline_openapi_document()["paths"].items() for method in methods
    }
    assert served == documented
