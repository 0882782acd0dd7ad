"""A setting whose value would make hubstream misbehave is refused when the settings are read, with
the variable named: before, BATCH_REAP_OPEN_AFTER_S=0 made the reaper delete every open batch,
TABLE_PARTITIONS=0 answered every batch request with a 500 (division by zero), and any refused
value printed pydantic's traceback from every CLI command."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.errors import ConfigError
from app.settings import get_settings

REFUSED = [
    ("TABLE_PARTITIONS", "0"),
    ("BATCH_REAP_OPEN_AFTER_S", "0"),
    ("BATCH_REAP_CLOSED_AFTER_S", "-1"),
    ("BATCH_REAP_INTERVAL_S", "0"),
    ("BATCH_ROUTE_TIMEOUT_S", "0"),
    ("OFFSET_FLUSH_INTERVAL_S", "0"),
    ("COMPOSITE_METADATA_REFRESH_S", "-2"),
    ("COMPOSITE_CLOCK_SKEW_S", "-1"),
    ("SUBSCRIPTION_FED_SETTLE_S", "-1"),
    ("BROKER_SESSION_TIMEOUT_S", "0"),
    ("BROKER_REBALANCE_TIMEOUT_S", "0"),
    ("MAX_GROUP_ID_BYTES", "0"),
    ("MAX_PAYLOAD_BYTES", "0"),
    ("WEB_PORT", "70000"),
    ("WEB_PORT", "abc"),
    ("BATCH_GROUP_SIZE_ITEMS", "3"),
]


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.parametrize(("name", "value"), REFUSED, ids=[f"{n}={v}" for n, v in REFUSED])
def test_a_value_that_would_misbehave_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"invalid setting: {name}='{value}': "):
        get_settings()


def test_a_cli_command_with_a_refused_setting_says_so_in_one_line() -> None:
    result = CliRunner().invoke(
        cli, ["hub", "token", "--actor", "5790000000001"], env={"TABLE_PARTITIONS": "0"}
    )
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "error: invalid setting: TABLE_PARTITIONS='0': Input should be greater than or equal to 1"
    ]
