"""A backing service's failure reads as one line naming the service (the CLI prints it after
`error:`); anything else is not taken for one."""

from __future__ import annotations

import pymysql
import pytest
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.cosmos.exceptions import CosmosHttpResponseError
from confluent_kafka import KafkaError, KafkaException

from app.service_errors import service_failure


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (
            CosmosHttpResponseError(  # type: ignore[no-untyped-call]
                status_code=401,
                message="The input authorization token can't serve the request.\nActivityId: 1",
            ),
            "Cosmos DB answered 401: The input authorization token can't serve the request.",
        ),
        (
            ServiceRequestError("Cannot connect to host"),
            "Cosmos DB did not answer (ServiceRequestError: Cannot",
        ),
        (ServiceResponseError("reset"), "Cosmos DB did not answer (ServiceResponseError: reset)"),
        (
            KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down")),
            'Kafka failed the request: KafkaError{code=_TRANSPORT,val=-195,str="broker down"}',
        ),
        (
            pymysql.err.OperationalError(2003, "Can't connect to MySQL server"),
            'MySQL failed the request: (2003, "Can\'t connect to MySQL server")',
        ),
        (ConnectionRefusedError(111, "refused"), "a backing service did not answer (ConnectionRefusedError"),
        (TimeoutError("slow"), "a backing service did not answer (TimeoutError: slow)"),
    ],
)
def test_a_service_failure_reads_as_one_line_naming_the_service(exc: BaseException, said: str) -> None:
    line = service_failure(exc)
    assert line is not None and line.startswith(said), line
    assert "\n" not in line


@pytest.mark.parametrize("exc", [ValueError("x"), KeyError("k"), RuntimeError("bug")])
def test_other_errors_are_not_taken_for_a_service_failure(exc: Exception) -> None:
    assert service_failure(exc) is None
