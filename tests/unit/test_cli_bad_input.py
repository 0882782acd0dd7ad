"""Bad input to the CLI ends with one `error:` line and exit status 2, never a traceback: a
malformed --url or --worker-url (before: httpx.InvalidURL or http.client.InvalidURL from inside the client), a
subscription forwarding a framing header or forwarding headers to an in-process sink, and
pipeline definitions that are not UTF-8, give transforms that are not a list, or name a transform
file with a syntax error or a relative module (before: UnicodeDecodeError, TypeError, SyntaxError)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.pipeline.definition import load_definition
from app.pipeline.errors import InvalidDefinition


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["batch", "--url", "http://127.0.0.1:6066x", "get", "5"], "Port could not be cast to integer"),
        (["batch", "--url", "127.0.0.1:6066", "get", "5"], "is not an http(s) URL with a host"),
        (["pipeline", "--url", "http://127.0.0.1:8083x", "pause", "mirror"], "Port could not be cast"),
        (["pipeline", "--url", "ftp://host/", "pause", "mirror"], "is not an http(s) URL with a host"),
        (
            ["run", "--worker-url", "worker-1:6066"],
            "--worker-url=worker-1:6066: expected http(s)://HOST:PORT",
        ),
        (["run", "--workers", "0"], "0 is not in the range x>=1"),  # before: an IndexError
        (["run", "--worker-url", "http://0.0.0.0:6066"], "expected http(s)://HOST:PORT"),
        (["run", "--worker-url", "http://a:b@worker-1:6066"], "scheme, host and port only"),
        (
            [
                "subscription",
                "create",
                "s",
                "--topic",
                "t",
                "--http",
                "http://127.0.0.1:1/",
                "--forward-header",
                "Host",
            ],
            "frames the request",
        ),
        (
            ["subscription", "create", "s", "--topic", "t", "--sink", "x", "--forward-header", "tenant"],
            "http endpoints only",
        ),
    ],
)
def test_a_malformed_url_is_refused_before_any_request(args: list[str], said: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output


WRITER = "writers:\n  - {name: f, type: jsonl, path: out.jsonl, transforms: %s}\n"
READER = "name: bad\nreader: {type: jsonl, path: in.jsonl, namespace: d}\n"


@pytest.mark.parametrize(
    ("definition", "said"),
    [
        (b"\xff\xfe name: x", "invalid YAML: 'utf-8' codec can't decode"),
        ((READER + WRITER % "5").encode(), "transforms: must be a list, got 5"),
        ((READER + WRITER % "['broken.py:f']").encode(), "cannot load transform 'broken.py:f': SyntaxError"),
        ((READER + WRITER % "['.relative:f']").encode(), "cannot load transform '.relative:f'"),
        (
            (READER + WRITER % "['raising.py:f']").encode(),
            "cannot load transform 'raising.py:f': RuntimeError",
        ),
    ],
    ids=["not-utf8", "transforms-not-a-list", "syntax-error", "relative-module", "raises-on-import"],
)
def test_a_bad_pipeline_definition_is_one_error_line(tmp_path: Path, definition: bytes, said: str) -> None:
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "raising.py").write_text("raise RuntimeError('no database here')\n")
    file = tmp_path / "pipeline.yaml"
    file.write_bytes(definition)
    with pytest.raises(InvalidDefinition, match=re.escape(said)):
        load_definition(file)
    result = CliRunner().invoke(cli, ["pipeline", "run", str(file)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and said in result.output, result.output
