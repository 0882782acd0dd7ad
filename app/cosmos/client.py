"""Opening the azure-cosmos async client against the configured or embedded endpoint.

TLS verification is switched off for the embedded endpoint (its certificate is
self-signed); a configured COSMOS_ENDPOINT is verified unless COSMOS_VERIFY_TLS=false.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType

from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient, DatabaseProxy

from app.settings import Settings
from app.web.metrics import cosmos_request_hook, cosmos_response_hook

__all__ = ["CosmosStore", "open_cosmos"]


@dataclass
class CosmosStore:
    """An open client plus its database; containers are created on first use and cached."""

    client: CosmosClient
    database: DatabaseProxy
    _containers: dict[str, ContainerProxy] = field(default_factory=dict)

    async def container(self, name: str, partition_key_path: str) -> ContainerProxy:
        proxy = self._containers.get(name)
        if proxy is None:
            proxy = await self.database.create_container_if_not_exists(
                id=name, partition_key=PartitionKey(path=partition_key_path)
            )
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


async def open_cosmos(settings: Settings, database: str | None = None) -> CosmosStore:
    client = CosmosClient(
        settings.cosmos_url,
        credential=settings.cosmos_credential,
        connection_verify=settings.cosmos_verify_tls and not settings.embedded_cosmos,
        raw_request_hook=cosmos_request_hook,  # /metrics: Cosmos requests and latency
        raw_response_hook=cosmos_response_hook,
        # The embedded endpoint is one Node process: under a large read it accepts connections
        # late, so it gets a longer connection timeout than the SDK's default.
        connection_timeout=60 if settings.embedded_cosmos else 5,
    )
    try:
        db = await client.create_database_if_not_exists(id=database or settings.cosmos_database)
    except BaseException:
        await client.close()
        raise
    return CosmosStore(client=client, database=db)
