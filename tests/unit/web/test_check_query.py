"""A query parameter an endpoint does not take is a 400 naming it, not silently ignored."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from app.errors import InvalidInput
from app.web.responses import check_query


def test_declared_parameters_pass() -> None:
    check_query(make_mocked_request("GET", "/api/peek?bundleId=x"), "bundleId")
    check_query(make_mocked_request("GET", "/api/peek"), "bundleId")


def test_an_unknown_parameter_is_named() -> None:
    with pytest.raises(
        InvalidInput, match=r"unknown query parameters \['bundleid'\]; this endpoint takes: bundleId"
    ):
        check_query(make_mocked_request("GET", "/api/peek?bundleid=x"), "bundleId")
