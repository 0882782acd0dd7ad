"""Fuzz every HTTP endpoint of a real worker (all capabilities), and of a pipeline process, with
schemathesis, driven by the /openapi.json each serves: schema-valid and schema-violating requests,
with the admin token on (mutating calls carry it, actor calls carry an actor JWT). Checks: no 5xx,
status codes, content types and bodies conform to the document, invalid input is rejected with 4xx,
and an admin-guarded call without credentials gets 401. Bounded: FUZZ_EXAMPLES per operation and mode.
"""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from app.settings import Settings
from tests.integration.pipeline.support import free_port, start, stop, wait
from tests.integration.web.worker import Worker, start_worker, worker_env

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "8"))
BUDGET_S = float(os.environ.get("FUZZ_BUDGET_S", "120"))
ADMIN_TOKEN = f"fuzz-admin-{uuid.uuid4().hex}"
JWT_SECRET = f"fuzz-jwt-{uuid.uuid4().hex}"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]


@pytest.fixture(scope="module")
def fuzz_worker(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    unique = uuid.uuid4().hex[:10]
    home = tmp_path_factory.mktemp("fuzz-worker")
    env = worker_env(stack, unique, home, HUBSTREAM_ADMIN_TOKEN=ADMIN_TOKEN, HUB_JWT_SECRET=JWT_SECRET)
    worker = start_worker(env, home)
    try:
        yield worker
    finally:
        worker.stop()


def _auth(path: str) -> dict[str, str]:
    if path.startswith(("/api/peek", "/api/dequeue")):
        token = jwt.encode(
            {"sub": "fuzz-actor", "exp": int(time.time()) + 3600}, JWT_SECRET, algorithm="HS256"
        )
        return {"Authorization": f"Bearer {token}"}
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _fuzz(url: str, min_operations: int) -> tuple[list[str], int, int]:
    """Failures, calls made and operations fuzzed against the /openapi.json served at url. (The
    worker's test below keeps its own copy of this loop: derandomized examples are seeded by the
    function hypothesis runs, so moving it would change which requests it sends.)"""
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # an Err fails
    assert len(operations) >= min_operations, [o.label for o in operations]
    failures: list[str] = []
    deadline = time.monotonic() + BUDGET_S
    calls = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if time.monotonic() > deadline:
                failures.append(f"fuzz budget of {BUDGET_S:.0f} s used up before {operation.label}")
                break

            @hypothesis_settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(mode))
            def call(case: schemathesis.Case[Any]) -> None:
                nonlocal calls
                calls += 1
                case.call_and_validate(base_url=url, headers=_auth(case.path), checks=CHECKS, timeout=30)

            try:
                call()
            except Unsatisfiable:
                # Nothing can violate this operation's schema (no parameters or only free strings).
                assert mode is GenerationMode.NEGATIVE, operation.label
            except Exception as exc:
                failures.append(f"{operation.label} [{mode.value}]: {exc}"[:3000])
    return failures, calls, len(operations)


@pytest.mark.integration
def test_fuzz_every_endpoint_against_the_served_openapi(fuzz_worker: Worker) -> None:
    schema = schemathesis.openapi.from_url(fuzz_worker.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # an Err fails
    assert len(operations) >= 20
    failures: list[str] = []
    deadline = time.monotonic() + BUDGET_S
    calls = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if time.monotonic() > deadline:
                failures.append(f"fuzz budget of {BUDGET_S:.0f} s used up before {operation.label}")
                break

            @hypothesis_settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(mode))
            def call(case: schemathesis.Case[Any]) -> None:
                nonlocal calls
                calls += 1
                case.call_and_validate(
                    base_url=fuzz_worker.url, headers=_auth(case.path), checks=CHECKS, timeout=30
                )

            try:
                call()
            except Unsatisfiable:
                # Nothing can violate this operation's schema (no parameters or only free strings).
                assert mode is GenerationMode.NEGATIVE, operation.label
            except Exception as exc:
                failures.append(f"{operation.label} [{mode.value}]: {exc}"[:3000])
    assert fuzz_worker.proc.poll() is None, "the worker died under fuzzing"
    assert not failures, "\n\n".join(failures) + "\n\nworker log:\n" + fuzz_worker.log()[-3000:]
    assert calls >= len(operations)


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_fuzz_the_pipeline_process_api(stack: Settings, tmp_path: Path) -> None:
    """The same against a live `hubstream pipeline run` (its own document; random names: mostly 4xx)."""
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(b'{"id": "d%d"}\n' % i for i in range(5)))
    file = tmp_path / "pipeline.yaml"
    file.write_text(
        f"name: fuzz-{uuid.uuid4().hex[:10]}\n"
        f"reader: {{type: jsonl, path: {source}}}\n"
        f"writers:\n  - {{name: file, type: jsonl, path: {tmp_path / 'out.jsonl'}}}\n"
    )
    port = free_port()
    proc = start(file, tmp_path, port, HUBSTREAM_ADMIN_TOKEN=ADMIN_TOKEN, HUB_JWT_SECRET=JWT_SECRET)
    url = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: _answers(url + "/pipelines"), 90, "the pipeline process's API")
        failures, calls, operations = _fuzz(url, 11)  # schemathesis leaves out /openapi.json itself
        assert proc.poll() is None, "the pipeline process died under fuzzing"
        logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("run-*.log"))
        assert not failures, "\n\n".join(failures) + "\n\nprocess log:\n" + logs[-3000:]
        assert calls >= operations
    finally:
        stop(proc)


def _answers(url: str) -> bool:
    request = urllib.request.Request(url, headers=_auth(""))  # reads need the token too
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False
