"""A record's headers as an HTTP endpoint receives them: an outsider sets them, so they never
frame the request, pick its host or speak with credentials, whatever their case; an allow-list
sends only what it names and never admits a framing header."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.subscription.errors import InvalidSubscription
from app.subscription.forwarded_headers import DENIED, DENIED_PREFIXES, FRAMING, check_allow_list, forwarded
from app.subscription.model import EndpointSpec

OURS = ("X-Group-Id", "X-Message-Id", "X-Subscription", "X-Attempt", "X-Owner-Epoch")
ATTACK = {
    "Transfer-Encoding": "chunked",
    "Host": "evil.example",
    "Authorization": "Bearer stolen",
    "content-length": "0",
    "Cookie": "session=theirs",
    "Proxy-Authorization": "Basic eA==",
    "X-Forwarded-For": "10.0.0.1",
    "Connection": "close",
    "x-group-id": "someone-else",
    "trace": "t-1\r\nInjected: yes",
    "bad name": "v",
    "tenant": "acme",
}


def test_framing_authority_and_our_headers_never_go() -> None:
    assert forwarded(ATTACK, OURS) == {"tenant": "acme"}


def test_an_allow_list_sends_only_what_it_names() -> None:
    allow = check_allow_list(["Tenant", "Authorization", "tenant"])
    assert allow == ("Tenant", "Authorization")
    assert forwarded(ATTACK, OURS, allow) == {"Authorization": "Bearer stolen", "tenant": "acme"}


@pytest.mark.parametrize("name", sorted(FRAMING))
def test_an_allow_list_never_admits_a_framing_header(name: str) -> None:
    with pytest.raises(InvalidSubscription, match="never forwarded"):
        check_allow_list([name.upper()])
    with pytest.raises(InvalidSubscription, match="never forwarded"):
        EndpointSpec("http", "http://127.0.0.1:1/in", 5.0, (name,))


def test_an_allow_list_is_for_http_endpoints_and_survives_the_registry() -> None:
    with pytest.raises(InvalidSubscription, match="http endpoints only"):
        EndpointSpec("callable", "sink", 5.0, ("tenant",))
    with pytest.raises(InvalidSubscription, match="not an HTTP header name"):
        EndpointSpec("http", "http://127.0.0.1:1/in", 5.0, ("a b",))
    spec = EndpointSpec("http", "http://127.0.0.1:1/in", 5.0, ("tenant",))
    assert EndpointSpec.from_json(spec.to_json()) == spec
    plain = EndpointSpec("http", "http://127.0.0.1:1/in")
    assert "forward_headers" not in plain.to_json() and EndpointSpec.from_json(plain.to_json()) == plain


_names = st.one_of(
    st.sampled_from(sorted(DENIED) + [p + "x" for p in DENIED_PREFIXES] + list(OURS) + ["tenant", "trace"]),
    st.text(min_size=1, max_size=12),
).map(lambda n: n.upper() if len(n) % 2 else n)


@given(st.dictionaries(_names, st.text(max_size=12), max_size=8), st.none() | st.lists(_names, max_size=4))
def test_no_header_that_frames_or_is_ours_ever_goes(headers: dict[str, str], allow: list[str] | None) -> None:
    try:
        allowed = None if allow is None else check_allow_list(allow)
    except InvalidSubscription:
        return
    out = forwarded(headers, OURS, allowed)
    ours = {n.lower() for n in OURS}
    for name, value in out.items():
        lower = name.lower()
        assert headers[name] == value
        assert lower not in FRAMING and lower not in ours
        assert not any(c in value for c in "\r\n\x00")
        if allowed is None:
            assert lower not in DENIED and not lower.startswith(DENIED_PREFIXES)
        else:
            assert lower in {a.lower() for a in allowed}
