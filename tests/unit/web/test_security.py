"""Bind check, actor-path exemption and log redaction (the middleware is tested against a worker)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import SecretStr

from app.errors import ConfigError
from app.settings import Settings, is_loopback
from app.web.security import REDACTED, check_bind, install_log_redaction, is_actor_path, redact


def settings_from(**env: Any) -> Settings:
    """Settings(**env), by the variables' names: the aliases, which the typed __init__ does not know."""
    return Settings(**env)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.org", ""])
def test_non_loopback_hosts(host: str) -> None:
    assert not is_loopback(host)


def test_binding_beyond_loopback_needs_the_admin_token() -> None:
    check_bind(settings_from(WEB_HOST="127.0.0.1"))
    with pytest.raises(ConfigError, match=r"WEB_HOST=0\.0\.0\.0.*HUBSTREAM_ADMIN_TOKEN"):
        check_bind(settings_from(WEB_HOST="0.0.0.0"))
    with pytest.raises(ConfigError, match="HUBSTREAM_ADMIN_TOKEN"):
        check_bind(settings_from(WEB_HOST="0.0.0.0", HUBSTREAM_ADMIN_TOKEN="  "))
    check_bind(settings_from(WEB_HOST="0.0.0.0", HUBSTREAM_ADMIN_TOKEN=ADMIN, HUB_JWT_SECRET=STRONG))


STRONG = "k" * 32
ADMIN = "a" * 32


@pytest.mark.parametrize("token", ["x", "a" * 31, " " + "a" * 30 + " "])
def test_binding_beyond_loopback_refuses_a_short_admin_token(token: str) -> None:
    """A one-character admin token was accepted off loopback: guessed in a few requests."""
    with pytest.raises(ConfigError, match=r"HUBSTREAM_ADMIN_TOKEN must be at least 32 characters"):
        check_bind(settings_from(WEB_HOST="0.0.0.0", HUBSTREAM_ADMIN_TOKEN=token, HUB_JWT_SECRET=STRONG))
    check_bind(settings_from(WEB_HOST="127.0.0.1", HUBSTREAM_ADMIN_TOKEN=token))  # loopback: any token


@pytest.mark.parametrize("secret", [None, "hubstream-local-dev-secret-change-me", "k" * 31])
def test_binding_beyond_loopback_refuses_the_public_or_a_short_jwt_secret(secret: str | None) -> None:
    extra = {} if secret is None else {"HUB_JWT_SECRET": secret}
    with pytest.raises(ConfigError, match=r"WEB_HOST=0\.0\.0\.0.*HUB_JWT_SECRET.*32 bytes"):
        check_bind(settings_from(WEB_HOST="0.0.0.0", HUBSTREAM_ADMIN_TOKEN=ADMIN, **extra))
    check_bind(settings_from(WEB_HOST="127.0.0.1", **extra))  # loopback: the development secret is fine


@pytest.mark.parametrize(
    ("path", "actor"),
    [
        ("/api/peek", True),
        ("/api/peek/timeseries", True),
        ("/api/dequeue", True),
        ("/api/peeking", False),
        ("/api/v1/batch/exact", False),
        ("/api/dequeue/x", False),
    ],
)
def test_actor_paths(path: str, actor: bool) -> None:
    assert is_actor_path(path) is actor


def test_redact_removes_secrets_and_bearer_tokens() -> None:
    text = "token=s3cr3t-value header Authorization: Bearer eyJhbGciOi.x.y tail"
    clean = redact(text, ["s3cr3t-value"])
    assert "s3cr3t-value" not in clean and "eyJhbGciOi" not in clean
    assert clean == f"token={REDACTED} header Authorization: Bearer {REDACTED} tail"


def test_log_records_are_redacted_for_every_logger(caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_from(
        HUBSTREAM_ADMIN_TOKEN="admin-token-under-test",
        HUB_JWT_SECRET="jwt-secret-under-test",
        COSMOS_KEY="cosmos-key-under-test",
        MYSQL_URL="mysql://root:mysql-password-under-test@127.0.0.1:3306/x",
    )
    previous = logging.getLogRecordFactory()
    install_log_redaction(settings)
    try:
        log = logging.getLogger("hubstream.test.redaction")
        with caplog.at_level(logging.INFO, logger="hubstream.test.redaction"):
            log.info("settings %s %s", settings.admin_token.get_secret_value(), "jwt-secret-under-test")  # type: ignore[union-attr]
            log.warning("key=%s pw=%s", "cosmos-key-under-test", "mysql-password-under-test")
            try:
                raise RuntimeError("failed with admin-token-under-test")
            except RuntimeError:
                log.exception("boom")
        text = caplog.text + "".join(r.exc_text or "" for r in caplog.records)
        for secret in (
            "admin-token-under-test",
            "jwt-secret-under-test",
            "cosmos-key-under-test",
            "mysql-password-under-test",
        ):
            assert secret not in text
        assert caplog.records[0].getMessage() == f"settings {REDACTED} {REDACTED}"
    finally:
        logging.setLogRecordFactory(previous)


def test_secret_str_stays_secret_in_settings_repr() -> None:
    settings = settings_from(HUBSTREAM_ADMIN_TOKEN="admin-token-under-test")
    assert isinstance(settings.admin_token, SecretStr)
    assert "admin-token-under-test" not in repr(settings)


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        (
            "POST http://alice:s3cret@hooks.example/in answered 500",
            "POST http://***@hooks.example/in answered 500",
        ),
        ("to https://tok3n@api.example:8443/x and back", "to https://***@api.example:8443/x and back"),
        ("mysql://root:pw@127.0.0.1:3306/db", "mysql://***@127.0.0.1:3306/db"),
        ("http://hooks.example/in?x=1 has none", "http://hooks.example/in?x=1 has none"),
        ("mail alice@example.com", "mail alice@example.com"),
    ],
)
def test_credentials_in_urls_never_reach_a_log_line(text: str, clean: str) -> None:
    """Endpoint URLs may carry credentials; before, they reached DLQ headers and logs as given."""
    assert redact(text, []) == clean
