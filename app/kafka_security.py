"""How every Kafka client of a process connects: TLS and SASL, from the KAFKA_SECURITY_* and
KAFKA_SSL_* / KAFKA_SASL_* settings, in the three dialects hubstream's clients speak
(librdkafka options, aiokafka arguments; the worker turns them into Faust's credentials).

Security is a property of the process, read from its environment once (`get_settings`), like the
bootstrap address of a worker: every client a process builds, whichever library, connects alike.
`client_config` is the one way a librdkafka configuration starts.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import ConfigError
from app.settings import KafkaProtocol, SaslMechanism, Settings, get_settings

__all__ = ["KafkaSecurity", "client_config", "kafka_security"]


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    protocol: KafkaProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ca_location: Path | None = None
    certificate_location: Path | None = None
    key_location: Path | None = None
    key_password: str | None = None
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaSecurity:
        """The settings' security, or ConfigError naming the first setting that does not fit: a
        credential that the protocol would leave unused is refused rather than ignored."""
        password = settings.kafka_sasl_password
        key_password = settings.kafka_ssl_key_password
        security = cls(
            protocol=settings.kafka_security_protocol,
            sasl_mechanism=settings.kafka_sasl_mechanism,
            sasl_username=settings.kafka_sasl_username,
            sasl_password=password.get_secret_value() if password is not None else None,
            ca_location=settings.kafka_ssl_ca_location,
            certificate_location=settings.kafka_ssl_certificate_location,
            key_location=settings.kafka_ssl_key_location,
            key_password=key_password.get_secret_value() if key_password is not None else None,
            check_hostname=settings.kafka_ssl_check_hostname,
        )
        if security.protocol != "PLAINTEXT" and settings.embedded_kafka:
            raise ConfigError(
                f"KAFKA_SECURITY_PROTOCOL={security.protocol} needs KAFKA_BOOTSTRAP: the embedded broker "
                "hubstream starts speaks PLAINTEXT on loopback"
            )
        security._check()
        return security

    def _check(self) -> None:
        given = {
            "KAFKA_SASL_MECHANISM": self.sasl_mechanism,
            "KAFKA_SASL_USERNAME": self.sasl_username,
            "KAFKA_SASL_PASSWORD": self.sasl_password,
        }
        if self.sasl:
            missing = [name for name, value in given.items() if value is None]
            if missing:
                raise ConfigError(f"KAFKA_SECURITY_PROTOCOL={self.protocol} needs {', '.join(missing)}")
        elif unused := [name for name, value in given.items() if value is not None]:
            raise ConfigError(
                f"{', '.join(unused)} set, but KAFKA_SECURITY_PROTOCOL={self.protocol} uses no SASL"
            )
        files = {
            "KAFKA_SSL_CA_LOCATION": self.ca_location,
            "KAFKA_SSL_CERTIFICATE_LOCATION": self.certificate_location,
            "KAFKA_SSL_KEY_LOCATION": self.key_location,
        }
        if not self.tls:
            unused = [name for name, value in files.items() if value is not None]
            if unused or self.key_password is not None:
                unused += ["KAFKA_SSL_KEY_PASSWORD"] if self.key_password is not None else []
                raise ConfigError(
                    f"{', '.join(unused)} set, but KAFKA_SECURITY_PROTOCOL={self.protocol} uses no TLS"
                )
            return
        for name, path in files.items():
            if path is not None and not path.is_file():
                raise ConfigError(f"{name}={path}: no such file")
        if (self.certificate_location is None) != (self.key_location is None):
            raise ConfigError(
                "a client certificate needs both KAFKA_SSL_CERTIFICATE_LOCATION and KAFKA_SSL_KEY_LOCATION"
            )

    def librdkafka(self) -> dict[str, str]:
        """The options of confluent-kafka's clients (librdkafka names)."""
        conf: dict[str, str] = {"security.protocol": self.protocol}
        if self.sasl:
            conf |= {
                "sasl.mechanism": str(self.sasl_mechanism),
                "sasl.username": str(self.sasl_username),
                "sasl.password": str(self.sasl_password),
            }
        if self.tls:
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
            optional = {
                "ssl.ca.location": self.ca_location,
                "ssl.certificate.location": self.certificate_location,
                "ssl.key.location": self.key_location,
                "ssl.key.password": self.key_password,
            }
            conf |= {name: str(value) for name, value in optional.items() if value is not None}
        return conf

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of aiokafka and Faust clients; None without TLS. The system's CAs are
        trusted unless KAFKA_SSL_CA_LOCATION names others, as librdkafka does."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=str(self.ca_location) if self.ca_location else None)
        if self.certificate_location is not None and self.key_location is not None:
            context.load_cert_chain(str(self.certificate_location), str(self.key_location), self.key_password)
        context.check_hostname = self.check_hostname
        if not self.check_hostname:
            context.verify_mode = ssl.CERT_REQUIRED  # the chain is still verified, only not the name
        return context

    def aiokafka(self) -> dict[str, Any]:
        """The keyword arguments of aiokafka's clients."""
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.sasl:
            kwargs |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.sasl_username,
                "sasl_plain_password": self.sasl_password,
            }
        return kwargs


def kafka_security() -> KafkaSecurity:
    """This process's Kafka security (its environment, read once)."""
    return KafkaSecurity.from_settings(get_settings())


def client_config(bootstrap: str, **options: Any) -> dict[str, Any]:
    """A librdkafka configuration for `bootstrap` with this process's security, then the caller's
    own `options` (a client's linger, idempotence, …), then the broker's quirks."""
    config = {"bootstrap.servers": bootstrap, **kafka_security().librdkafka(), **options}
    if config.get("enable.idempotence") and tansu_s3_loses_idempotent_retries(get_settings()):
        config |= without_idempotence_for_tansu_s3()
    return config


def tansu_s3_loses_idempotent_retries(settings: Settings) -> bool:
    """The embedded Tansu broker with its S3 storage engine: after a restart it answers a batch
    an idempotent producer retries as a duplicate of one it had taken but never stored, so that
    batch is acknowledged and lost (measured: 80-26,300 of 100,000 records over three restarts,
    none without idempotence; docs/reliability.md)."""
    return settings.broker_kind == "embedded" and settings.embedded_broker_storage == "s3"


def without_idempotence_for_tansu_s3() -> dict[str, Any]:
    """Producers for that engine: acks from every replica, one request in flight per connection
    (a retry cannot overtake a later batch), no idempotence. A retry may then write a record
    twice, which every reader of hubstream takes as a replay."""
    return {"enable.idempotence": False, "acks": "all", "max.in.flight.requests.per.connection": 1}
