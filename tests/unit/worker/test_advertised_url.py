"""The URL a worker gives its peers (Faust's canonical URL): batch requests for a partition another
worker owns are forwarded there, and the dashboard calls it. With WEB_HOST=0.0.0.0 it used to be
`http://0.0.0.0:6066`, so a worker forwarding to its peer called itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.errors import ConfigError
from app.settings import Settings, is_wildcard
from app.worker.factory import create_app

TOKEN = "t" * 32
SECRET = "s" * 32


def settings_from(**env: Any) -> Settings:
    """Settings(**env), by the variables' names: the aliases, which the typed __init__ does not know."""
    return Settings(**env)


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({}, "http://127.0.0.1:6066"),
        ({"WEB_HOST": "::1", "WEB_PORT": "7000"}, "http://[::1]:7000"),
        ({"WEB_HOST": "10.1.2.3"}, "http://10.1.2.3:6066"),
        ({"WEB_HOST": "0.0.0.0", "WEB_ADVERTISED_URL": "http://worker-1:6066"}, "http://worker-1:6066"),
        ({"WEB_ADVERTISED_URL": "https://w1.example.com:8443/"}, "https://w1.example.com:8443"),
    ],
)
def test_the_advertised_url(env: dict[str, str], url: str) -> None:
    assert settings_from(**env).advertised_url == url


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", ""])
def test_a_wildcard_bind_without_an_advertised_url_is_refused(host: str) -> None:
    assert is_wildcard(host)
    with pytest.raises(ConfigError, match="set WEB_ADVERTISED_URL"):
        settings_from(WEB_HOST=host).advertised_url  # noqa: B018 (the property raises)


@pytest.mark.parametrize(
    "url",
    [
        "worker-1:6066",
        "ftp://w1:21",
        "http://0.0.0.0:6066",
        "http://u:p@w1:6066",
        "http://w1:6066/api",
        "http:///",
    ],
)
def test_an_advertised_url_that_is_not_scheme_host_and_port_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="WEB_ADVERTISED_URL"):
        settings_from(WEB_ADVERTISED_URL=url).advertised_url  # noqa: B018


def test_the_worker_advertises_it_to_its_peers(tmp_path: Path) -> None:
    settings = settings_from(
        HUBSTREAM_HOME=str(tmp_path),
        WEB_HOST="0.0.0.0",
        WEB_ADVERTISED_URL="http://worker-1:6066",
        HUBSTREAM_ADMIN_TOKEN=TOKEN,
        HUB_JWT_SECRET=SECRET,
    )
    conf = create_app(settings).conf
    assert str(conf.canonical_url) == "http://worker-1:6066"
    assert conf.web_bind == "0.0.0.0"


def test_a_worker_bound_to_every_interface_without_it_does_not_start(tmp_path: Path) -> None:
    settings = settings_from(
        HUBSTREAM_HOME=str(tmp_path), WEB_HOST="0.0.0.0", HUBSTREAM_ADMIN_TOKEN=TOKEN, HUB_JWT_SECRET=SECRET
    )
    with pytest.raises(ConfigError, match="WEB_ADVERTISED_URL"):
        create_app(settings)
