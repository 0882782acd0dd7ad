"""The errors a backing service (Cosmos DB, Kafka, MySQL) raises when it does not answer or refuses a
request, named once: the web layer answers them with 503, the CLI with a one-line message."""

from __future__ import annotations

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.cosmos.exceptions import CosmosHttpResponseError
from confluent_kafka import KafkaException
from pymysql.err import MySQLError

__all__ = ["REFUSED", "UNANSWERED", "service_failure"]

# No answer came: the service is down, unreachable or too slow. Trying again may work.
UNANSWERED: tuple[type[BaseException], ...] = (
    ServiceRequestError,
    ServiceResponseError,
    TimeoutError,
    ConnectionError,
)
# The service answered with an error: a wrong key, a missing database, a throttled request.
REFUSED: tuple[type[BaseException], ...] = (CosmosHttpResponseError, KafkaException, MySQLError)


def service_failure(exc: BaseException) -> str | None:
    """A one-line account of `exc` when a backing service raised it; None for anything else."""
    if isinstance(exc, CosmosHttpResponseError):
        lines = [line for line in str(exc.message or exc).splitlines() if line.strip()]
        said = next((line for line in lines if not line.startswith("Status code:")), "")
        return f"Cosmos DB answered {exc.status_code}: {said.strip()[:300]}"
    if isinstance(exc, KafkaException):
        account = f"Kafka failed the request: {exc}"
    elif isinstance(exc, MySQLError):
        account = f"MySQL failed the request: {exc}"
    elif isinstance(exc, ServiceRequestError | ServiceResponseError):
        account = f"Cosmos DB did not answer ({type(exc).__name__}: {exc})"
    elif isinstance(exc, UNANSWERED):
        account = f"a backing service did not answer ({type(exc).__name__}: {exc})"
    else:
        return None
    return account[:400]
