"""Actor tokens of the hub's Peek/Dequeue API: HS256 JWTs whose `sub` is the actor id.

A token's claims are its holder's input, so a token says little on its own: it must carry `exp`
(one without it would be good for ever, and stay in the verified-token memory for ever), and
with HUB_JWT_AUDIENCE / HUB_JWT_ISSUER set, its `aud` and `iss` must name them; a token minted
for another service with the same secret is then refused, and an identity provider's tokens
that carry `aud` are taken. Expiry allows HUB_JWT_LEEWAY_S for clocks that differ.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import jwt

from app.settings import Settings
from app.web.responses import Unauthorized

__all__ = ["TokenRules", "mint_actor_token", "verify_actor_token"]

_ACTOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")  # the DataAvailable recipient rule


@dataclass(frozen=True, slots=True)
class TokenRules:
    secret: str
    audience: str | None = None
    issuer: str | None = None
    leeway_s: float = 30.0

    @classmethod
    def of(cls, settings: Settings) -> TokenRules:
        return cls(
            settings.hub_jwt_secret.get_secret_value(),
            settings.hub_jwt_audience,
            settings.hub_jwt_issuer,
            settings.hub_jwt_leeway_s,
        )


def mint_actor_token(rules: TokenRules, actor: str, ttl_s: int = 3600) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {"sub": actor, "iat": now, "exp": now + ttl_s}
    if rules.audience is not None:
        claims["aud"] = rules.audience
    if rules.issuer is not None:
        claims["iss"] = rules.issuer
    return jwt.encode(claims, rules.secret, algorithm="HS256")


def verify_actor_token(rules: TokenRules, token: str) -> tuple[str, float]:
    """The actor id and the token's `exp`; Unauthorized when it does not hold."""
    if not token.isascii():  # a JWT is base64url and dots; PyJWT fails on undecodable header bytes
        raise Unauthorized("invalid token: not ASCII")
    required = ["sub", "exp", *(["aud"] if rules.audience else []), *(["iss"] if rules.issuer else [])]
    try:
        claims = jwt.decode(
            token,
            rules.secret,
            algorithms=["HS256"],
            audience=rules.audience,
            issuer=rules.issuer,
            leeway=rules.leeway_s,
            options={"require": required},
        )
    except jwt.ExpiredSignatureError as exc:
        raise Unauthorized("token expired") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise Unauthorized(f"invalid token: no {exc.claim!r} claim") from exc
    except jwt.InvalidTokenError as exc:
        raise Unauthorized(f"invalid token: {type(exc).__name__}") from exc
    actor = claims.get("sub")
    if not isinstance(actor, str) or not _ACTOR.match(actor):
        raise Unauthorized("token subject is not a valid actor id")
    expires = claims["exp"]
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        raise Unauthorized("invalid token: exp is not a number")
    return actor, float(expires)
