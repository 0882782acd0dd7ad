"""The compose file cannot run here (no Docker engine). It is checked against the Compose
specification (compose-spec, after the variable interpolation `docker compose` does), and for what
it refers to: build contexts and Dockerfiles, hubstream subcommands and options, settings names,
COPY sources, the topic and subscription the ingest job needs, and the deployment rules (ports on
loopback, pinned images, restart policies, worker healthchecks, no secret with a public default)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import compose_spec
import pytest
import yaml

from app.cli.main import cli
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SETTING_NAMES = {str(field.validation_alias) for field in Settings.model_fields.values()}
# What a user exports before `docker compose up` (the file's header says so).
USER_ENV = {
    "HUBSTREAM_ADMIN_TOKEN": "a" * 64,
    "HUB_JWT_SECRET": "s" * 64,
    "COSMOS_EMULATOR_TAG": "2025-01-01",
}
_VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """`${NAME}`, `${NAME:-default}` and `${NAME:?error}` as `docker compose` reads them."""

    def value(match: re.Match[str]) -> str:
        name, kind, rest = match.groups()
        if name in env:
            return env[name]
        assert kind and kind.endswith("-"), f"{name} must be set: {rest}"
        return rest

    return _VARIABLE.sub(value, text)


def load_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(interpolate(COMPOSE.read_text(), USER_ENV))[
        "services"
    ]
    return services


def hubstream_services() -> list[str]:
    return [name for name, spec in load_services().items() if "build" in spec]


def _command(argv: list[str]) -> tuple[click.Command, list[str]]:
    command: click.Command = cli
    words = list(argv)
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command = command.commands[words.pop(0)]
    assert not isinstance(command, click.Group), f"{argv} does not name a command"
    return command, words


def test_the_file_follows_the_compose_specification() -> None:
    data = yaml.safe_load(interpolate(COMPOSE.read_text(), USER_ENV))
    parsed = compose_spec.PyCompose.from_json(json.dumps(data))
    assert set(parsed.service_names()) == set(data["services"])
    parsed.validate()


def test_it_refuses_to_start_without_the_secrets_and_the_emulator_pin() -> None:
    for name in USER_ENV:
        with pytest.raises(AssertionError, match=f"{name} must be set"):
            interpolate(COMPOSE.read_text(), {k: v for k, v in USER_ENV.items() if k != name})


def test_every_service_has_an_image_or_a_build_that_exists() -> None:
    for name, spec in load_services().items():
        assert "image" in spec or "build" in spec, name
        if "build" in spec:
            context = (COMPOSE.parent / spec["build"]["context"]).resolve()
            assert context == ROOT
            assert (context / spec["build"]["dockerfile"]).is_file()


def test_dockerfile_installs_the_lock_and_runs_unprivileged() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    for line in lines:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    assert any(line.startswith("RUN pip install") and "-c requirements.lock" in line for line in lines)
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"


def test_the_build_context_leaves_out_what_the_image_does_not_copy() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".venv", "node_modules", ".git", ".hubstream", "data"} <= ignored


@pytest.mark.parametrize("service", hubstream_services())
def test_hubstream_commands_and_options_exist(service: str) -> None:
    command, words = _command(load_services()[service].get("command", ["worker"]))
    params = command.get_params(click.Context(cli))
    options = {opt for p in params for opt in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
    for word in words:
        if word.startswith("--"):
            assert word.split("=")[0] in options, f"{service}: unknown option {word}"


@pytest.mark.parametrize("service", hubstream_services())
def test_environment_names_are_settings(service: str) -> None:
    env: dict[str, str] = load_services()[service]["environment"]
    unknown = set(env) - SETTING_NAMES
    assert not unknown, f"{service}: environment names no setting: {sorted(unknown)}"


def test_the_topic_and_subscription_the_flow_needs_are_created_before_the_workers_and_the_ingest() -> None:
    services = load_services()
    made = {tuple(spec.get("command", [])[:3]) for spec in services.values()}
    assert ("topic", "create", "data-available") in made
    assert ("subscription", "create", "hub-feed") in made
    for name, spec in services.items():
        if name.startswith("init-"):
            assert "--if-not-exists" in spec["command"], f"{name} must be idempotent (a second `up`)"
    ingest = services["spark-ingest"]["command"]
    assert ingest[ingest.index("--topic") + 1] == "data-available"
    for worker in ("worker-1", "worker-2"):
        assert (
            services[worker]["depends_on"]["init-subscription"]["condition"]
            == "service_completed_successfully"
        )


def test_workers_advertise_their_own_url_and_have_a_healthcheck() -> None:
    services = load_services()
    for worker in ("worker-1", "worker-2"):
        env = services[worker]["environment"]
        assert env["WEB_ADVERTISED_URL"] == f"http://{worker}:{env['WEB_PORT']}"
        probe = " ".join(services[worker]["healthcheck"]["test"])
        assert f"127.0.0.1:{env['WEB_PORT']}/api/v1/batch/status" in probe


def test_deployment_rules() -> None:
    for name, spec in load_services().items():
        for port in spec.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond this host"
        image = spec.get("image", "")
        if "build" not in spec:
            tag = image.rsplit(":", 1)[-1] if ":" in image.split("/")[-1] else ""
            assert tag and tag != "latest", f"{name}: pin its image ({image})"
        long_running = spec.get("restart") != "no"
        if long_running:
            assert spec.get("restart") in ("unless-stopped", "always", "on-failure"), (
                f"{name}: a restart policy"
            )


def test_infrastructure_images_are_the_documented_engines() -> None:
    images = {spec.get("image", "").split(":")[0] for spec in load_services().values()}
    assert {"apache/kafka", "mcr.microsoft.com/cosmosdb/linux/azure-cosmos-emulator", "mysql"} <= images


def test_the_host_reaches_kafka_on_its_own_listener() -> None:
    kafka = load_services()["kafka"]
    assert "EXTERNAL://localhost:29092" in kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "127.0.0.1:29092:29092" in kafka["ports"]


def test_the_mirror_pipeline_and_its_table_exist() -> None:
    services = load_services()
    command = services["pipeline-mirror"]["command"]
    definition = yaml.safe_load((ROOT / command[2]).read_text())
    init = (ROOT / "docker" / "mysql" / "init.sql").read_text()
    assert f"CREATE TABLE IF NOT EXISTS {definition['writers'][0]['table']} (" in init
    mounts = services["mysql"]["volumes"]
    assert any(m.startswith("./mysql/init.sql:/docker-entrypoint-initdb.d/") for m in mounts)


def test_secrets_have_no_public_default() -> None:
    env = yaml.safe_load(COMPOSE.read_text())["x-hubstream-env"]
    for name in ("HUBSTREAM_ADMIN_TOKEN", "HUB_JWT_SECRET"):
        assert env[name].startswith(f"${{{name}:?"), f"{name} must come from the environment, required"
