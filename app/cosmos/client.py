"""Opening the azure-cosmos async client against the configured or embedded endpoint.

The embedded endpoint speaks plain HTTP on the loopback interface; a configured
COSMOS_ENDPOINT's TLS certificate is verified unless COSMOS_VERIFY_TLS=false.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from azure.core.pipeline.transport import AioHttpTransport
from azure.core.settings import settings as azure_settings
from azure.cosmos import PartitionKey, exceptions
from azure.cosmos.aio import ContainerProxy, CosmosClient, DatabaseProxy

from app.observability.metrics import cosmos_request_hook, cosmos_response_hook
from app.settings import Settings

__all__ = ["CosmosStore", "open_cosmos"]

# The embedded endpoint answers a point read of a missing document with 500 (it dereferences the
# absent document while checking the partition key header), which the SDK retries for about half a
# second; with this header it skips that check and answers 404 at once, as real Cosmos DB does.
_EMBEDDED_READ_FIX = "x-ms-documentdb-query-enablecrosspartition"


# The SDK logs every request and response at INFO. Building those lines cost about a tenth of a
# busy worker's CPU, so they go to a logger of their own, quiet unless its level is lowered.
HTTP_LOGGER = logging.getLogger("hubstream.cosmos.http")
HTTP_LOGGER.setLevel(logging.WARNING)

# azure-core looks its tracing settings up in the environment on every request and in every
# traced call (several per cent of a busy worker's CPU): they are read once, as they are at start.
azure_settings.tracing_enabled.set_value(azure_settings.tracing_enabled())
azure_settings.tracing_implementation.set_value(azure_settings.tracing_implementation())

_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _transport() -> AioHttpTransport:
    """aiohttp reading its settings from the environment looks up ~/.netrc in a thread for every
    request (a tenth of a worker's CPU): it does only when a proxy is configured there."""
    return AioHttpTransport(use_env_settings=any(os.environ.get(v) for v in _PROXY_VARIABLES))


def _embedded_request_hook(request: Any) -> None:
    http = request.http_request
    if http.method == "GET" and "/docs/" in http.url:
        http.headers[_EMBEDDED_READ_FIX] = "true"
    cosmos_request_hook(request)


@dataclass
class CosmosStore:
    """An open client plus its database; containers are created on first use and cached."""

    client: CosmosClient
    database: DatabaseProxy
    _containers: dict[str, ContainerProxy] = field(default_factory=dict)

    async def container(
        self,
        name: str,
        partition_key_path: str,
        *,
        item_ttl: bool = False,
        indexing_policy: dict[str, Any] | None = None,
        throughput: int | None = None,
    ) -> ContainerProxy:
        """The container, created on first use; `item_ttl`: created with per-item time to live on
        (a document's `ttl` field then expires it); `indexing_policy` and `throughput` (RU/s) too
        apply only when it is created here (a container created before keeps its settings)."""
        proxy = self._containers.get(name)
        if proxy is None:
            try:
                proxy = await self.database.create_container_if_not_exists(
                    id=name,
                    partition_key=PartitionKey(path=partition_key_path),
                    default_ttl=-1 if item_ttl else None,
                    indexing_policy=indexing_policy,
                    offer_throughput=throughput,
                )
            except exceptions.CosmosResourceExistsError:  # created meanwhile: see open_cosmos
                proxy = self.database.get_container_client(name)
            self._containers[name] = proxy
        return proxy

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> CosmosStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def open_cosmos(
    settings: Settings, database: str | None = None, *, connection_timeout: float | None = None, **client: Any
) -> CosmosStore:
    """Open a client and its database (created on first use).

    `client` passes extra keyword arguments to `CosmosClient` (a bench's own transport, say).
    """
    if connection_timeout is None:
        # The embedded endpoint is one Node process: under a large read it accepts connections
        # late, so it gets a longer connection timeout than the SDK's default.
        connection_timeout = 60 if settings.embedded_cosmos else 5
    cosmos = CosmosClient(
        settings.cosmos_url,
        credential=settings.cosmos_credential,
        connection_verify=settings.cosmos_verify_tls and not settings.embedded_cosmos,
        # /metrics: Cosmos requests and latency
        raw_request_hook=_embedded_request_hook if settings.embedded_cosmos else cosmos_request_hook,
        raw_response_hook=cosmos_response_hook,
        connection_timeout=connection_timeout,
        logger=HTTP_LOGGER,
        **{"transport": _transport(), **client},
    )
    name = database or settings.cosmos_database
    try:
        try:
            db = await cosmos.create_database_if_not_exists(id=name)
        except exceptions.CosmosResourceExistsError:
            # The SDK reads, then creates: another worker's create in between answers 409. The
            # database exists either way (workers open the same one at the same moment on a
            # fresh stack), as with containers above.
            db = cosmos.get_database_client(name)
    except BaseException:
        await cosmos.close()
        raise
    return CosmosStore(client=cosmos, database=db)
