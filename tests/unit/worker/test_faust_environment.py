"""hubstream's settings are the only configuration a worker takes: Faust's own environment
variables (WEB_BIND, BROKER_URL, TOPIC_PARTITIONS, APP_DATADIR, APP_WEB_TABLES_ENABLED, …) used to
win over what `create_app` gives Faust, so `WEB_BIND=0.0.0.0` bound a worker on every interface
past the check that refuses a non-loopback bind without an admin token."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from app.worker.factory import create_app

FAUST_ENV = {
    "WEB_BIND": "0.0.0.0",
    "BROKER_URL": "kafka://evil.example:1",
    "TOPIC_PARTITIONS": "99",
    "APP_DATADIR": "/tmp/evil",
    "APP_WEB_TABLES_ENABLED": "true",
    "WEB_TRANSPORT": "unix:///tmp/evil.sock",
    "BROKER_SESSION_TIMEOUT": "1",
}


def test_faust_environment_variables_take_no_effect(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in FAUST_ENV.items():
        monkeypatch.setenv(name, value)
    settings = Settings(HUBSTREAM_HOME=str(tmp_path))  # type: ignore[call-arg]
    conf = create_app(settings).conf
    assert conf.web_bind == settings.web_host == "127.0.0.1"
    assert [str(url) for url in conf.broker] == [f"kafka://{settings.bootstrap}"]
    assert conf.topic_partitions == settings.table_partitions
    assert Path(conf.datadir).is_relative_to(tmp_path)
    assert conf.web_tables_enabled is False
    assert str(conf.web_transport) == "tcp:"
    assert conf.broker_session_timeout == settings.broker_session_timeout_s
