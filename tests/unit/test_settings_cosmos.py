"""COSMOS_KEY: the emulator's public key is sent only to an endpoint on this machine; a remote
COSMOS_ENDPOINT without COSMOS_KEY is refused with the setting to change (before, it was sent the
public key)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from app.errors import ConfigError
from app.settings import EMULATOR_KEY, Settings


@pytest.mark.parametrize(
    "endpoint",
    [None, "http://127.0.0.1:8081/", "https://localhost:8081/", "https://[::1]:8081/", "http://127.0.0.2/"],
)
def test_the_emulator_key_serves_an_endpoint_on_this_machine(endpoint: str | None) -> None:
    assert Settings(cosmos_endpoint=endpoint).cosmos_credential == EMULATOR_KEY


@pytest.mark.parametrize(
    "endpoint", ["https://acct.documents.azure.com:443/", "https://cosmos:8081/", "http://10.0.0.5:8081/"]
)
def test_a_remote_endpoint_without_a_key_is_refused(endpoint: str) -> None:
    with pytest.raises(ConfigError, match="COSMOS_KEY is not set for COSMOS_ENDPOINT="):
        _ = Settings(cosmos_endpoint=endpoint).cosmos_credential


def test_a_key_given_is_used_for_any_endpoint() -> None:
    settings = Settings(
        cosmos_endpoint="https://acct.documents.azure.com:443/", cosmos_key=SecretStr("k" * 88)
    )
    assert settings.cosmos_credential == "k" * 88
