"""README.md stays the complete user document: every setting, CLI command and served HTTP
endpoint appears in it, and everything its reference tables list still exists."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from agents.openapi import worker_openapi_document
from app.cli.main import cli
from app.pipeline.api_models import pipeline_openapi_document
from app.settings import Settings

README_PATH = Path(__file__).resolve().parents[2] / "README.md"
README = README_PATH.read_text(encoding="utf-8")
README_LINES = README.splitlines()
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


def _setting_names() -> list[str]:
    names = []
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        assert isinstance(alias, str), f"Settings.{field_name} has no environment name"
        names.append(alias)
    return names


def _command_paths(command: click.Command, path: tuple[str, ...]) -> list[str]:
    if isinstance(command, click.Group):
        return [
            found
            for name, sub in sorted(command.commands.items())
            for found in _command_paths(sub, (*path, name))
        ]
    return [" ".join(path)]


COMMANDS = _command_paths(cli, ("hubstream",))
OPENAPI_OPERATIONS = [  # a worker's endpoints and a pipeline process's
    (method.upper(), path)
    for document in (worker_openapi_document(), pipeline_openapi_document())
    for path, operations in document["paths"].items()
    for method in operations
    if method in HTTP_METHODS
]


def _cli_rows() -> list[str]:
    """The command column of the CLI reference table (rows starting with "| `hubstream ")."""
    return [m.group(1) for line in README_LINES if (m := re.match(r"^\| `(hubstream [^`]*)`", line))]


def _http_rows() -> list[tuple[str, str]]:
    """(method, path) of each row of the HTTP endpoints table, query string dropped."""
    rows = []
    for line in README_LINES:
        m = re.match(r"^\| (GET|POST|PUT|PATCH|DELETE) \| `([^`?]+)[`?]", line)
        if m:
            rows.append((m.group(1), m.group(2)))
    return rows


def test_the_introspection_finds_something() -> None:
    assert len(_setting_names()) >= 20
    assert "hubstream subscription dlq list" in COMMANDS
    assert ("GET", "/metrics") in OPENAPI_OPERATIONS


@pytest.mark.parametrize("name", _setting_names())
def test_every_setting_has_a_row_in_the_settings_table(name: str) -> None:
    assert f"| `{name}` |" in README, f"README.md: add {name} to the Settings table"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_cli_command_has_a_row_in_the_cli_reference(command: str) -> None:
    assert command in README
    rows = [row for row in _cli_rows() if row == command or row.startswith(command + " ")]
    assert rows, f"README.md: add a row for `{command}` to the CLI reference"


@pytest.mark.parametrize(("method", "path"), OPENAPI_OPERATIONS)
def test_every_served_endpoint_has_a_row_in_the_http_table(method: str, path: str) -> None:
    assert path in README
    assert (method, path) in _http_rows(), f"README.md: add `{method} {path}` to the HTTP endpoints table"


def test_every_command_the_readme_lists_exists() -> None:
    for row in _cli_rows():
        words = []
        for token in row.split()[1:]:
            if not re.fullmatch(r"[a-z][a-z-]*", token):
                break
            words.append(token)
        assert " ".join(["hubstream", *words]) in COMMANDS, f"README.md lists `{row}`: no such command"


def test_every_endpoint_the_readme_lists_is_served() -> None:
    rows = _http_rows()
    assert rows
    for method, path in rows:
        assert (method, path) in OPENAPI_OPERATIONS, f"README.md lists `{method} {path}`: not served"


def test_quick_start_sets_up_with_make_run_and_make_test() -> None:
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make run", "make test"]


def test_relative_links_and_images_point_at_files() -> None:
    targets = re.findall(r"\]\((?!https?://|#)([^)#\s]+)", README)
    assert "docs/dashboard.png" in targets
    for target in targets:
        assert (README_PATH.parent / target).exists(), f"README.md links to missing {target}"


def test_table_of_contents_anchors_match_headings() -> None:
    def anchor(heading: str) -> str:
        text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
        return text.replace(" ", "-")

    headings = {anchor(h) for h in re.findall(r"^#{2,3} (.+)$", README, flags=re.MULTILINE)}
    for link in re.findall(r"\]\(#([^)]+)\)", README):
        assert link in headings, f"README.md links to #{link}: no such heading"
