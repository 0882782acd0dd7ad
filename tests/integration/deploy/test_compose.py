"""The compose file cannot run here (no Docker engine); check that everything it refers to exists:
build contexts and Dockerfiles, hubstream subcommands and options, settings names, COPY sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from app.cli.main import cli
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker" / "compose.yaml"
SETTING_NAMES = {str(field.validation_alias) for field in Settings.model_fields.values()}


def load_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def hubstream_services() -> list[str]:
    return [name for name, spec in load_services().items() if "build" in spec]


def test_every_service_has_an_image_or_a_build_that_exists() -> None:
    for name, spec in load_services().items():
        assert "image" in spec or "build" in spec, name
        if "build" in spec:
            context = (COMPOSE.parent / spec["build"]["context"]).resolve()
            assert context == ROOT
            assert (context / spec["build"]["dockerfile"]).is_file()


def test_dockerfile_copies_paths_that_exist() -> None:
    for line in (ROOT / "docker" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source


@pytest.mark.parametrize("service", hubstream_services())
def test_hubstream_commands_and_options_exist(service: str) -> None:
    argv: list[str] = load_services()[service].get("command", ["worker"])
    command: click.Command = cli
    ctx = click.Context(cli)
    words = list(argv)
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command = command.commands[words.pop(0)]
    assert not isinstance(command, click.Group), f"{service}: {argv} does not name a command"
    options = {opt for param in command.get_params(ctx) for opt in getattr(param, "opts", [])}
    for word in words:
        if word.startswith("--"):
            assert word in options, f"{service}: unknown option {word}"


@pytest.mark.parametrize("service", hubstream_services())
def test_environment_names_are_settings(service: str) -> None:
    env: dict[str, str] = load_services()[service]["environment"]
    unknown = set(env) - SETTING_NAMES
    assert not unknown, f"{service}: environment names no setting: {sorted(unknown)}"


def test_infrastructure_images_are_the_documented_engines() -> None:
    images = {spec.get("image", "").split(":")[0] for spec in load_services().values()}
    assert {"apache/kafka", "mcr.microsoft.com/cosmosdb/linux/azure-cosmos-emulator", "mysql"} <= images


def test_secrets_have_no_public_default() -> None:
    env = yaml.safe_load(COMPOSE.read_text())["x-hubstream-env"]
    for name in ("HUBSTREAM_ADMIN_TOKEN", "HUB_JWT_SECRET"):
        assert env[name].startswith(f"${{{name}:?"), f"{name} must come from the environment, required"
