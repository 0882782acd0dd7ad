"""Kafka security settings: what each client library is given, and the settings refused."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import faust
import pytest

from app.errors import ConfigError
from app.kafka_security import KafkaSecurity, client_config
from app.settings import Settings
from app.worker.factory import faust_credentials
from tests.support.tls_broker import self_signed

BOOTSTRAP = {"KAFKA_BOOTSTRAP": "kafka.example:9093"}


def settings_from(**env: Any) -> Settings:
    """Settings(**env), by the variables' names: the aliases, which the typed __init__ does not know."""
    return Settings(**env)


def security(**env: Any) -> KafkaSecurity:
    return KafkaSecurity.from_settings(settings_from(**BOOTSTRAP, **env))


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key (the CA of the tests that load a context)."""
    return self_signed(tmp_path_factory.mktemp("pem"), "test")


def test_plaintext_is_the_default_and_adds_nothing_to_a_client() -> None:
    plain = security()
    assert plain.librdkafka() == {"security.protocol": "PLAINTEXT"}
    assert plain.aiokafka() == {"security_protocol": "PLAINTEXT"}
    assert plain.ssl_context() is None and faust_credentials(plain) is None


def test_sasl_over_tls_reaches_all_three_client_libraries(pem: tuple[Path, Path]) -> None:
    cert, key = pem
    sasl = security(
        KAFKA_SECURITY_PROTOCOL="SASL_SSL",
        KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
        KAFKA_SASL_USERNAME="svc",
        KAFKA_SASL_PASSWORD="s3cret",
        KAFKA_SSL_CA_LOCATION=str(cert),
        KAFKA_SSL_CERTIFICATE_LOCATION=str(cert),
        KAFKA_SSL_KEY_LOCATION=str(key),
    )
    assert sasl.librdkafka() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": "s3cret",
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": str(cert),
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
    }
    kwargs = sasl.aiokafka()
    assert kwargs["security_protocol"] == "SASL_SSL" and kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("svc", "s3cret")
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    credentials = faust_credentials(sasl)
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL" and credentials.mechanism.value == "SCRAM-SHA-512"


def test_tls_without_a_hostname_check_still_verifies_the_chain(pem: tuple[Path, Path]) -> None:
    tls = security(
        KAFKA_SECURITY_PROTOCOL="SSL", KAFKA_SSL_CA_LOCATION=str(pem[0]), KAFKA_SSL_CHECK_HOSTNAME="false"
    )
    assert tls.librdkafka()["ssl.endpoint.identification.algorithm"] == "none"
    context = tls.ssl_context()
    assert context is not None and not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert isinstance(faust_credentials(tls), faust.SSLCredentials)


def test_a_client_keeps_its_own_options_next_to_the_security() -> None:
    conf = client_config("127.0.0.1:9092", **{"linger.ms": 5})
    assert conf == {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "PLAINTEXT", "linger.ms": 5}


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (
            {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN"},
            "needs KAFKA_SASL_USERNAME",
        ),
        ({"KAFKA_SASL_USERNAME": "svc"}, "KAFKA_SASL_USERNAME set, but KAFKA_SECURITY_PROTOCOL=PLAINTEXT"),
        (
            {
                "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "KAFKA_SSL_CA_LOCATION": "/etc/hosts",
                "KAFKA_SASL_MECHANISM": "PLAIN",
                "KAFKA_SASL_USERNAME": "u",
                "KAFKA_SASL_PASSWORD": "p",
            },
            "KAFKA_SSL_CA_LOCATION set, but",
        ),
        ({"KAFKA_SSL_KEY_PASSWORD": "k"}, "KAFKA_SSL_KEY_PASSWORD set, but"),
        ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CA_LOCATION": "/nonexistent/ca.pem"}, "no such file"),
        ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CERTIFICATE_LOCATION": "/etc/hosts"}, "needs both"),
    ],
)
def test_a_credential_the_protocol_would_not_use_is_refused(env: dict[str, str], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        security(**env)


def test_the_embedded_broker_takes_plaintext_only() -> None:
    with pytest.raises(ConfigError, match="needs KAFKA_BOOTSTRAP"):
        KafkaSecurity.from_settings(settings_from(KAFKA_SECURITY_PROTOCOL="SSL"))


@pytest.mark.parametrize(
    ("name", "value"), [("KAFKA_SECURITY_PROTOCOL", "TLS"), ("KAFKA_SASL_MECHANISM", "GSSAPI")]
)
def test_an_unknown_protocol_or_mechanism_is_a_settings_error(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        settings_from(**BOOTSTRAP, **{name: value})


@pytest.mark.parametrize(
    ("env", "quirk"),
    [
        ({}, False),  # the embedded broker in memory
        ({"EMBEDDED_BROKER_STORAGE": "s3"}, True),
        (
            {
                "KAFKA_BOOTSTRAP": "tansu.example:9092",
                "KAFKA_BROKER_KIND": "embedded",
                "EMBEDDED_BROKER_STORAGE": "s3",
            },
            True,
        ),
        ({**BOOTSTRAP, "EMBEDDED_BROKER_STORAGE": "s3"}, False),  # Apache Kafka: the setting is moot
    ],
)
def test_producers_drop_idempotence_only_on_the_embedded_brokers_s3_engine(
    env: dict[str, str], quirk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.kafka_security import tansu_s3_loses_idempotent_retries
    from app.settings import get_settings

    assert tansu_s3_loses_idempotent_retries(settings_from(**env)) is quirk
    for name in ("KAFKA_BOOTSTRAP", "KAFKA_BROKER_KIND", "EMBEDDED_BROKER_STORAGE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        producer = client_config("127.0.0.1:9092", **{"enable.idempotence": True, "linger.ms": 5})
        consumer = client_config("127.0.0.1:9092", **{"group.id": "g"})
    finally:
        get_settings.cache_clear()
    assert producer["enable.idempotence"] is not quirk and producer["linger.ms"] == 5
    if quirk:
        assert producer["acks"] == "all" and producer["max.in.flight.requests.per.connection"] == 1
    assert "enable.idempotence" not in consumer and "acks" not in consumer
