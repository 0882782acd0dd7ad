"""The actor API's token check: a token must carry `exp` (before, one without was answered and
remembered for ever), `aud` and `iss` are checked when configured (before, a token minted for
another service was taken and an identity provider's token with `aud` refused), expiry allows a
bounded leeway; verified tokens are remembered until they expire, and nothing else."""

from __future__ import annotations

import time

import jwt
import pytest
from aiohttp.test_utils import make_mocked_request
from pydantic import SecretStr

from app.hub.tokens import TokenRules, mint_actor_token
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
    tokens = [_token(f"actor-{i}", exp=time.time() + 60) for i in range(3)]
    for token in tokens:
        actor_from_request(_request(token), _settings(), verified)
    assert [verified.get(t) for t in tokens] == [None, "actor-1", "actor-2"]


def _claims_token(claims: dict[str, object], secret: str = SECRET) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


def test_a_token_without_exp_is_refused_and_not_remembered() -> None:
    verified = VerifiedTokens()
    token = _token("5790000000001")
    with pytest.raises(Unauthorized, match="no 'exp' claim"):
        actor_from_request(_request(token), _settings(), verified)
    assert verified.get(token) is None


@pytest.mark.parametrize("exp", ["soon", True, [1]])
def test_an_exp_that_is_not_a_number_is_refused(exp: object) -> None:
    token = _claims_token({"sub": "5790000000001", "exp": exp})
    with pytest.raises(Unauthorized, match=r"invalid token|token expired"):  # True counts as 1
        actor_from_request(_request(token), _settings(), VerifiedTokens())


def test_audience_and_issuer_are_checked_when_set() -> None:
    strict = _settings().model_copy(update={"hub_jwt_audience": "hub", "hub_jwt_issuer": "https://idp"})
    exp = int(time.time()) + 60
    good = _claims_token({"sub": "a1", "exp": exp, "aud": "hub", "iss": "https://idp"})
    assert actor_from_request(_request(good), strict) == "a1"
    for claims, said in [
        ({"sub": "a1", "exp": exp, "aud": "billing", "iss": "https://idp"}, "InvalidAudienceError"),
        ({"sub": "a1", "exp": exp, "aud": "hub", "iss": "https://other"}, "InvalidIssuerError"),
        ({"sub": "a1", "exp": exp, "iss": "https://idp"}, "no 'aud' claim"),
        ({"sub": "a1", "exp": exp, "aud": "hub"}, "no 'iss' claim"),
    ]:
        with pytest.raises(Unauthorized, match=said):
            actor_from_request(_request(_claims_token(claims)), strict)
    # Without an audience set, a token that carries one is refused (it was minted for someone).
    with pytest.raises(Unauthorized, match="InvalidAudienceError"):
        actor_from_request(_request(_claims_token({"sub": "a1", "exp": exp, "aud": "hub"})), _settings())


def test_expiry_allows_the_leeway_and_no_more() -> None:
    settings = _settings().model_copy(update={"hub_jwt_leeway_s": 30.0})
    now = int(time.time())
    assert actor_from_request(_request(_token("a1", exp=now - 10)), settings) == "a1"
    with pytest.raises(Unauthorized, match="token expired"):
        actor_from_request(_request(_token("a1", exp=now - 60)), settings)


def test_minted_tokens_carry_what_the_rules_check() -> None:
    strict = _settings().model_copy(update={"hub_jwt_audience": "hub", "hub_jwt_issuer": "https://idp"})
    token = mint_actor_token(TokenRules.of(strict), "a1", ttl_s=60)
    assert actor_from_request(_request(token), strict) == "a1"
