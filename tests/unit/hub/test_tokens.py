"""The actor API's token check remembers verified tokens until they expire, and nothing else."""

from __future__ import annotations

import time

import jwt
import pytest
from aiohttp.test_utils import make_mocked_request
from pydantic import SecretStr

from app.hub.web import VerifiedTokens, actor_from_request
from app.settings import Settings
from app.web.responses import Unauthorized

SECRET = "s" * 32


def _settings() -> Settings:
    return Settings().model_copy(update={"hub_jwt_secret": SecretStr(SECRET)})


def _request(token: str):  # type: ignore[no-untyped-def]
    return make_mocked_request("GET", "/api/peek", headers={"Authorization": f"Bearer {token}"})


def _token(sub: str, *, exp: float | None = None, secret: str = SECRET) -> str:
    claims: dict[str, object] = {"sub": sub}
    if exp is not None:
        claims["exp"] = int(exp)
    return jwt.encode(claims, secret, algorithm="HS256")


def test_a_verified_token_is_answered_from_memory_until_it_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    verified = VerifiedTokens()
    now = time.time()
    token = _token("5790000000001", exp=now + 60)
    assert actor_from_request(_request(token), _settings(), verified) == "5790000000001"

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded again")

    monkeypatch.setattr(jwt, "decode", refuse)
    assert actor_from_request(_request(token), _settings(), verified) == "5790000000001"

    monkeypatch.undo()  # past its exp the token is decoded again (and PyJWT refuses it then)
    decoded: list[str] = []
    decode = jwt.decode

    def counted(token: str, *args: object, **kwargs: object) -> object:
        decoded.append(token)
        return decode(token, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jwt, "decode", counted)
    monkeypatch.setattr(time, "time", lambda: now + 61)
    assert verified.get(token) is None
    actor_from_request(_request(token), _settings(), verified)
    assert decoded == [token]


def test_a_refused_token_is_not_remembered() -> None:
    verified = VerifiedTokens()
    forged = _token("5790000000001", exp=time.time() + 60, secret="t" * 32)
    for _ in range(2):
        with pytest.raises(Unauthorized, match="InvalidSignatureError"):
            actor_from_request(_request(forged), _settings(), verified)
    assert verified.get(forged) is None


def test_the_memory_is_bounded_oldest_first() -> None:
    verified = VerifiedTokens(max_entries=2)
    tokens = [_token(f"actor-{i}") for i in range(3)]
    for token in tokens:
        actor_from_request(_request(token), _settings(), verified)
    assert [verified.get(t) for t in tokens] == [None, "actor-1", "actor-2"]
