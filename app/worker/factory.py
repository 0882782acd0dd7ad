"""Builds the Faust app: broker, RocksDB table store, web server and its middlewares. The
capabilities' tables, agents and views are registered on it by `agents.build_worker`.
"""

from __future__ import annotations

import faust

from app import crashpoints
from app.kafka.broker import broker_for
from app.kafka_security import KafkaSecurity
from app.observability.metrics import http_middleware
from app.settings import Settings
from app.web.browser_guard import browser_guard
from app.web.responses import MAX_BODY_BYTES, json_errors
from app.web.security import admin_middleware, check_bind, install_log_redaction

__all__ = ["create_app"]


def faust_credentials(security: KafkaSecurity) -> faust.types.auth.CredentialsT | None:
    """Faust's `broker_credentials` for the process's Kafka security; None for PLAINTEXT."""
    if security.sasl:
        return faust.SASLCredentials(
            username=security.sasl_username,
            password=security.sasl_password,
            ssl_context=security.ssl_context(),
            mechanism=security.sasl_mechanism,
        )
    if security.tls:
        return faust.SSLCredentials(security.ssl_context())
    return None


def create_app(settings: Settings) -> faust.App:
    check_bind(settings)  # ConfigError: a non-loopback WEB_HOST needs HUBSTREAM_ADMIN_TOKEN
    install_log_redaction(settings)
    crashpoints.arm(settings.crash_at)  # fault injection for crash tests; nothing when unset
    broker_for(settings).patch_faust_recovery()  # the embedded broker: true changelog offsets
    datadir = settings.home / "data" / f"worker-{settings.web_port}"
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        # Faust reads its settings from the environment too, and those win over the ones given
        # here (WEB_BIND=0.0.0.0 bound past `check_bind`; BROKER_URL, APP_DATADIR, …): hubstream's
        # settings are the only configuration a worker takes.
        env={},
        web_transport="tcp://",
        broker=f"kafka://{settings.bootstrap}",
        broker_credentials=faust_credentials(KafkaSecurity.from_settings(settings)),
        store=settings.table_store,
        datadir=str(datadir),
        topic_partitions=settings.table_partitions,
        topic_replication_factor=settings.kafka_replication_factor,
        web_enabled=True,
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        canonical_url=settings.advertised_url,  # what peers forward to; ConfigError for a bare wildcard
        broker_session_timeout=settings.broker_session_timeout_s,
        broker_rebalance_timeout=settings.broker_rebalance_timeout_s,
        broker_heartbeat_interval=1.0,
        broker_commit_interval=settings.offset_flush_interval_s,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=1,
        # Tansu accepts but does not honour aborts, so processing stays at-least-once
        # with idempotent sinks; hubstream commits only after its sinks confirmed.
        processing_guarantee="at_least_once",
        autodiscover=False,
        web_in_thread=False,
        web_application_options={
            "middlewares": [
                http_middleware(),
                json_errors,
                browser_guard(settings),
                admin_middleware(settings),
            ],
            "client_max_size": MAX_BODY_BYTES,
        },
        # Faust's /table/ views expose raw table bytes and its /router/ views answer 500 for unknown
        # tables; hubstream serves its own views (agents/openapi.py lists every one).
        web_tables_enabled=False,
        web_router_enabled=False,
    )
    return app
