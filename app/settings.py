"""One typed settings object; the environment is read here and nowhere else."""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlparse

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.errors import ConfigError

__all__ = [
    "BROKER_KINDS",
    "DEFAULT_METADATA_TOPIC",
    "EMULATOR_KEY",
    "BrokerKind",
    "BrokerStorage",
    "KafkaProtocol",
    "MysqlTarget",
    "SaslMechanism",
    "Settings",
    "get_settings",
    "is_loopback",
    "is_wildcard",
    "worker_url",
]

# Which broker answers (app.kafka.broker): the embedded Tansu broker, whose quirks hubstream works
# around, or Apache Kafka (and brokers that answer as it does).
BrokerKind = Literal["embedded", "kafka"]
BrokerStorage = Literal["memory", "s3"]
BROKER_KINDS: tuple[BrokerKind, ...] = get_args(BrokerKind)
KafkaProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

# Event containers of the hub on the embedded Cosmos endpoint (see Settings.hub_event_shards).
EMBEDDED_EVENT_SHARDS = 64
DEFAULT_METADATA_TOPIC = "__hubstream_composite"
# The Cosmos DB emulator's published well-known key: sent only to an endpoint on this machine.
EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def is_wildcard(host: str) -> bool:
    """Whether `host` is a bind-everything address (0.0.0.0, ::) or empty, which names no host."""
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_unspecified
    except ValueError:
        return not host.strip()


class MysqlTarget:
    """MYSQL_URL split into the parts pymysql wants."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in {"mysql", "mariadb"}:
            raise ConfigError(f"MYSQL_URL must start with mysql://, got {parsed.scheme or 'nothing'}://")
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 3306
        self.user = parsed.username or "root"
        self.password = parsed.password or ""
        self.database = (parsed.path or "/hubstream").lstrip("/") or "hubstream"

    def redacted(self) -> str:
        return f"mysql://{self.user}@{self.host}:{self.port}/{self.database}"

    def connect_args(self, *, database: str | None = None, **options: Any) -> dict[str, Any]:
        """Keyword arguments for pymysql.connect: this server, `database` ('' for none), utf8mb4."""
        args: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "charset": "utf8mb4",
        }
        chosen = self.database if database is None else database
        if chosen:
            args["database"] = chosen
        return args | options


# Accepted only while the worker listens on loopback (app.web.security.check_bind).
DEV_JWT_SECRET = "hubstream-local-dev-secret-change-me"
MIN_JWT_SECRET_BYTES = 32


def worker_url(text: str, what: str) -> str:
    """`text` as the URL a worker is reached at (scheme, host and port, no trailing slash);
    ConfigError naming `what` when it is not one."""
    url = urlparse(text)
    if url.scheme not in ("http", "https") or not url.hostname or is_wildcard(url.hostname):
        raise ConfigError(f"{what}={text}: expected http(s)://HOST:PORT")
    if url.username or url.password or url.path not in ("", "/") or url.query or url.fragment:
        raise ConfigError(f"{what}={text}: a worker's URL is scheme, host and port only")
    return f"{url.scheme}://{url.netloc}"


class Settings(BaseSettings):
    """Every setting hubstream reads, with its environment variable name."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    # Where pid files, logs, RocksDB tables and generated data live.
    home: Path = Field(default=Path(".hubstream"), validation_alias="HUBSTREAM_HOME")

    # Kafka: unset means "start the embedded Tansu broker on 127.0.0.1:EMBEDDED_BROKER_PORT".
    kafka_bootstrap: str | None = Field(default=None, validation_alias="KAFKA_BOOTSTRAP")
    embedded_broker_port: int = Field(default=9092, ge=1, le=65535, validation_alias="EMBEDDED_BROKER_PORT")
    # Where the embedded broker keeps its topics: memory (gone when it stops), or s3: objects in an
    # S3 server the stack starts on 127.0.0.1:EMBEDDED_S3_PORT, so that the broker can be killed
    # and started again without losing what it acknowledged (while that S3 server runs).
    embedded_broker_storage: BrokerStorage = Field(
        default="memory", validation_alias="EMBEDDED_BROKER_STORAGE"
    )
    embedded_s3_port: int = Field(default=9400, ge=1, le=65535, validation_alias="EMBEDDED_S3_PORT")
    # embedded | kafka; unset: embedded without KAFKA_BOOTSTRAP, kafka with it. Say `embedded` of
    # a Tansu broker started elsewhere (KAFKA_BOOTSTRAP pointing at it).
    kafka_broker_kind: BrokerKind | None = Field(default=None, validation_alias="KAFKA_BROKER_KIND")
    # Replication factor of every topic hubstream creates (3 is usual on a production cluster).
    kafka_replication_factor: int = Field(default=1, ge=1, validation_alias="KAFKA_REPLICATION_FACTOR")
    # How every Kafka client connects (app.kafka_security): PLAINTEXT, SSL, SASL_PLAINTEXT or
    # SASL_SSL. The SASL mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; the TLS files are PEM.
    kafka_security_protocol: KafkaProtocol = Field(
        default="PLAINTEXT", validation_alias="KAFKA_SECURITY_PROTOCOL"
    )
    kafka_sasl_mechanism: SaslMechanism | None = Field(default=None, validation_alias="KAFKA_SASL_MECHANISM")
    kafka_sasl_username: str | None = Field(
        default=None, min_length=1, validation_alias="KAFKA_SASL_USERNAME"
    )
    kafka_sasl_password: SecretStr | None = Field(default=None, validation_alias="KAFKA_SASL_PASSWORD")
    kafka_ssl_ca_location: Path | None = Field(default=None, validation_alias="KAFKA_SSL_CA_LOCATION")
    kafka_ssl_certificate_location: Path | None = Field(
        default=None, validation_alias="KAFKA_SSL_CERTIFICATE_LOCATION"
    )
    kafka_ssl_key_location: Path | None = Field(default=None, validation_alias="KAFKA_SSL_KEY_LOCATION")
    kafka_ssl_key_password: SecretStr | None = Field(default=None, validation_alias="KAFKA_SSL_KEY_PASSWORD")
    # Whether the broker's certificate must name the host the client dialled (true unless a
    # private CA's certificates carry no such name).
    kafka_ssl_check_hostname: bool = Field(default=True, validation_alias="KAFKA_SSL_CHECK_HOSTNAME")

    # Cosmos DB: unset means "start the embedded endpoint on http://127.0.0.1:EMBEDDED_COSMOS_PORT"
    # (plain HTTP on the loopback interface only: TLS there cost a tenth of a worker's CPU).
    cosmos_endpoint: str | None = Field(default=None, validation_alias="COSMOS_ENDPOINT")
    cosmos_key: SecretStr | None = Field(default=None, validation_alias="COSMOS_KEY")
    cosmos_database: str = Field(default="hubstream", validation_alias="COSMOS_DATABASE")
    embedded_cosmos_port: int = Field(default=8081, ge=1, le=65535, validation_alias="EMBEDDED_COSMOS_PORT")
    # TLS is verified for a configured endpoint unless this is false (the Docker emulator's
    # certificate is self-signed); the embedded endpoint speaks plain HTTP on loopback.
    cosmos_verify_tls: bool = Field(default=True, validation_alias="COSMOS_VERIFY_TLS")

    mysql_url: str = Field(default="mysql://root@127.0.0.1:3306/hubstream", validation_alias="MYSQL_URL")
    # Binlog capture (the `binlog` pipeline reader) needs log_bin=ON and binlog_format=ROW, which a
    # running server cannot switch on: unset means "start the project's own MariaDB on
    # 127.0.0.1:EMBEDDED_MARIADB_PORT" with a row-based binlog and a datadir under HUBSTREAM_HOME.
    binlog_mysql_url: str | None = Field(default=None, validation_alias="BINLOG_MYSQL_URL")
    embedded_mariadb_port: int = Field(default=3407, ge=1, le=65535, validation_alias="EMBEDDED_MARIADB_PORT")

    # text (Faust's) or json: one object a line with the ids a record is about (app.observability.json_logs)
    log_format: Literal["text", "json"] = Field(default="text", validation_alias="LOG_FORMAT")

    # Worker web server (API, dashboard, metrics).
    web_host: str = Field(default="127.0.0.1", validation_alias="WEB_HOST")
    web_port: int = Field(default=6066, ge=1, le=65535, validation_alias="WEB_PORT")
    # The URL other workers and the dashboard reach this worker at (batch requests are forwarded
    # to the owning worker's URL). Unset: http://WEB_HOST:WEB_PORT, which a wildcard WEB_HOST
    # cannot give (peers would call themselves), so such a worker needs it set.
    web_advertised_url: str | None = Field(default=None, validation_alias="WEB_ADVERTISED_URL")
    # More host names a request's Host may name (comma-separated), besides addresses, localhost and
    # WEB_ADVERTISED_URL's host: e.g. a load balancer's name (app.web.browser_guard).
    web_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias="WEB_ALLOWED_HOSTS"
    )
    admin_token: SecretStr | None = Field(default=None, validation_alias="HUBSTREAM_ADMIN_TOKEN")
    # With an admin token set, reads need a token too: the admin token or this one, which reads only.
    read_token: SecretStr | None = Field(default=None, validation_alias="HUBSTREAM_READ_TOKEN")
    hub_jwt_secret: SecretStr = Field(
        default=SecretStr(DEV_JWT_SECRET),
        validation_alias="HUB_JWT_SECRET",
    )
    # Checked when set: actor tokens must then name them (`app.hub.tokens`).
    hub_jwt_audience: str | None = Field(default=None, min_length=1, validation_alias="HUB_JWT_AUDIENCE")
    hub_jwt_issuer: str | None = Field(default=None, min_length=1, validation_alias="HUB_JWT_ISSUER")
    hub_jwt_leeway_s: float = Field(default=30.0, ge=0, le=300, validation_alias="HUB_JWT_LEEWAY_S")

    # Faust worker.
    app_id: str = Field(default="hubstream", validation_alias="HUBSTREAM_APP_ID")
    table_store: str = Field(default="rocksdb://", validation_alias="TABLE_STORE")
    table_partitions: int = Field(default=8, ge=1, validation_alias="TABLE_PARTITIONS")
    broker_session_timeout_s: float = Field(default=10.0, gt=0, validation_alias="BROKER_SESSION_TIMEOUT_S")
    broker_rebalance_timeout_s: float = Field(
        default=10.0, gt=0, validation_alias="BROKER_REBALANCE_TIMEOUT_S"
    )
    offset_flush_interval_s: float = Field(default=1.0, gt=0, validation_alias="OFFSET_FLUSH_INTERVAL_S")
    # Fault injection for tests (app/crashpoints.py): NAME[:NTH[:kill|raise]],... Off when unset.
    crash_at: str | None = Field(default=None, validation_alias="HUBSTREAM_CRASH_AT")

    # Composite topics.
    metadata_topic: str = Field(default=DEFAULT_METADATA_TOPIC, validation_alias="COMPOSITE_METADATA_TOPIC")
    metadata_refresh_s: float = Field(default=2.0, gt=0, validation_alias="COMPOSITE_METADATA_REFRESH_S")
    # How far apart the clocks of the hosts that switch produce pointers and of the readers may
    # be: a reader starting up judges the switch grace on the switch time the definition records.
    clock_skew_s: float = Field(default=30.0, ge=0, validation_alias="COMPOSITE_CLOCK_SKEW_S")
    max_group_id_bytes: int = Field(default=256, ge=1, validation_alias="MAX_GROUP_ID_BYTES")
    max_payload_bytes: int = Field(default=1_048_576, ge=1, validation_alias="MAX_PAYLOAD_BYTES")

    # batch
    batch_acks_topic: str = Field(default="batch-acks", validation_alias="BATCH_ACKS_TOPIC")
    batch_completions_topic: str = Field(
        default="batch-completions", validation_alias="BATCH_COMPLETIONS_TOPIC"
    )
    batch_group_size_items: int = Field(
        default=4096, ge=8, le=1_048_576, validation_alias="BATCH_GROUP_SIZE_ITEMS"
    )
    batch_max_items_per_add: int = Field(default=5_000_000, ge=1, validation_alias="BATCH_MAX_ITEMS_PER_ADD")
    batch_reap_open_after_s: float = Field(
        default=7 * 86400.0, gt=0, validation_alias="BATCH_REAP_OPEN_AFTER_S"
    )
    batch_reap_closed_after_s: float = Field(
        default=86400.0, gt=0, validation_alias="BATCH_REAP_CLOSED_AFTER_S"
    )
    batch_reap_interval_s: float = Field(default=60.0, gt=0, validation_alias="BATCH_REAP_INTERVAL_S")
    batch_route_timeout_s: float = Field(default=30.0, gt=0, validation_alias="BATCH_ROUTE_TIMEOUT_S")

    # pipelines (set by `hubstream pipeline run FILE`; a worker without it runs no pipeline)
    pipeline_file: Path | None = Field(default=None, validation_alias="PIPELINE_FILE")
    pipeline_exit_when_idle: bool = Field(default=False, validation_alias="PIPELINE_EXIT_WHEN_IDLE")
    pipeline_progress: bool = Field(default=False, validation_alias="PIPELINE_PROGRESS")
    # The pipeline process's HTTP API (on WEB_HOST); 8083 is Kafka Connect's REST port.
    pipeline_web_port: int = Field(default=8083, ge=1, le=65535, validation_alias="PIPELINE_WEB_PORT")

    # hub
    hub_container_prefix: str = Field(default="hub", validation_alias="HUB_CONTAINER_PREFIX")
    hub_drawer_capacity: int = Field(default=10_000, ge=1, validation_alias="HUB_DRAWER_CAPACITY")
    # 0: one container on a configured Cosmos DB, EMBEDDED_EVENT_SHARDS on the embedded endpoint
    hub_event_containers: int = Field(default=0, ge=0, le=256, validation_alias="HUB_EVENT_CONTAINERS")
    hub_parallel_drawers: int = Field(default=6, ge=1, le=64, validation_alias="HUB_PARALLEL_DRAWERS")
    hub_read_page_size: int = Field(default=1000, ge=1, le=10_000, validation_alias="HUB_READ_PAGE_SIZE")
    hub_save_concurrency: int = Field(default=16, ge=1, le=256, validation_alias="HUB_SAVE_CONCURRENCY")
    hub_save_recipients: int = Field(default=32, ge=1, le=4096, validation_alias="HUB_SAVE_RECIPIENTS")
    hub_save_lease_s: float = Field(default=15.0, gt=0, validation_alias="HUB_SAVE_LEASE_S")
    # false: every dequeue writes its drawers (while workers of a version without deferred
    # acknowledgements run beside this one; docs/hub.md)
    hub_defer_acks: bool = Field(default=True, validation_alias="HUB_DEFER_ACKS")
    # How long an event id stays known after its save (index entries expire then; a redelivery
    # later is saved again as a new event); 0: for ever.
    hub_dedup_window_s: int = Field(default=604_800, ge=0, validation_alias="HUB_DEDUP_WINDOW_S")
    # Seconds between a worker's sweeps reclaiming drained drawers (`hubstream hub gc`); 0: none.
    hub_reclaim_interval_s: float = Field(default=300.0, ge=0, validation_alias="HUB_RECLAIM_INTERVAL_S")

    # subscription
    subscription_registry_topic: str = Field(
        default="__hubstream_subscriptions", validation_alias="SUBSCRIPTION_REGISTRY_TOPIC"
    )
    subscription_shard_slots: int = Field(
        default=12, ge=1, le=256, validation_alias="SUBSCRIPTION_SHARD_SLOTS"
    )
    subscription_max_in_flight: int = Field(default=64, ge=1, validation_alias="SUBSCRIPTION_MAX_IN_FLIGHT")
    subscription_batch_max: int = Field(default=30_000, ge=1, validation_alias="SUBSCRIPTION_BATCH_MAX")
    # After feeding old RQ partitions ended, how long a shard waits before it dates where the fed
    # copies end: a replaced feeder's producer may still deliver copies it was handed until their
    # delivery timeout (librdkafka's message.timeout.ms, 300 s) has passed.
    subscription_fed_settle_s: float = Field(
        default=330.0, ge=0, validation_alias="SUBSCRIPTION_FED_SETTLE_S"
    )
    # A shard's lease of its lane (app.ordered.lease): a stale owner stops acting at most this long
    # after its last confirmed read of the owner log; a takeover from an owner that did not release
    # its lane waits this long.
    subscription_lease_s: float = Field(default=10.0, ge=1.0, validation_alias="SUBSCRIPTION_LEASE_S")

    @field_validator("web_allowed_hosts", mode="before")
    @classmethod
    def _host_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @property
    def advertised_url(self) -> str:
        """WEB_ADVERTISED_URL, or http://WEB_HOST:WEB_PORT; ConfigError when neither names a host
        that others can reach."""
        if self.web_advertised_url is None:
            if is_wildcard(self.web_host):
                raise ConfigError(
                    f"WEB_HOST={self.web_host} binds every interface and names none: set WEB_ADVERTISED_URL "
                    f"to the URL other workers reach this one at (e.g. http://worker-1:{self.web_port})"
                )
            host = self.web_host.strip().strip("[]")
            return f"http://{f'[{host}]' if ':' in host else host}:{self.web_port}"
        return worker_url(self.web_advertised_url, "WEB_ADVERTISED_URL")

    @property
    def embedded_kafka(self) -> bool:
        return self.kafka_bootstrap is None

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap or f"127.0.0.1:{self.embedded_broker_port}"

    @property
    def broker_kind(self) -> BrokerKind:
        """The broker whose answers hubstream expects (app.kafka.broker.broker_for)."""
        if self.kafka_broker_kind is not None:
            return self.kafka_broker_kind
        return "embedded" if self.embedded_kafka else "kafka"

    @property
    def hub_event_shards(self) -> int:
        """Containers the hub spreads event documents over (a cabinet's drawers over consecutive ones).

        The embedded endpoint evaluates a query over every document of its container and builds
        that input in quadratic time, so there events are spread over several small containers.
        """
        if self.hub_event_containers:
            return self.hub_event_containers
        return EMBEDDED_EVENT_SHARDS if self.embedded_cosmos else 1

    @property
    def embedded_cosmos(self) -> bool:
        return self.cosmos_endpoint is None

    @property
    def cosmos_url(self) -> str:
        return self.cosmos_endpoint or f"http://127.0.0.1:{self.embedded_cosmos_port}/"

    @property
    def cosmos_credential(self) -> str:
        """COSMOS_KEY; unset, the emulator's public key, but only for an endpoint on this machine
        (a remote one would be sent a key anyone can read, and any emulator there would take it)."""
        if self.cosmos_key is not None:
            return self.cosmos_key.get_secret_value()
        if self.cosmos_endpoint is None or is_loopback(urlparse(self.cosmos_endpoint).hostname or ""):
            return EMULATOR_KEY
        raise ConfigError(
            f"COSMOS_KEY is not set for COSMOS_ENDPOINT={self.cosmos_endpoint}: the emulator's public "
            "key is used only for an endpoint on this machine; set COSMOS_KEY to the account's key"
        )

    @property
    def embedded_mariadb(self) -> bool:
        return not self.binlog_mysql_url

    @property
    def binlog_mysql(self) -> MysqlTarget:
        """The server the binlog reader captures from (BINLOG_MYSQL_URL or the embedded MariaDB)."""
        return MysqlTarget(
            self.binlog_mysql_url or f"mysql://root@127.0.0.1:{self.embedded_mariadb_port}/hubstream"
        )

    @property
    def mysql(self) -> MysqlTarget:
        return MysqlTarget(self.mysql_url)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings from the environment; ConfigError naming each variable whose value is refused."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}={error.get('input')!r:.60}: {error['msg']}"
            for error in exc.errors()
        )
        raise ConfigError(f"invalid setting: {problems}") from None
