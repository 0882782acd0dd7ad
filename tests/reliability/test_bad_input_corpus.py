"""Bad-input corpus against one real worker with every capability (admin token and actor JWTs on).

HTTP: malformed JSON, wrong types, missing fields, bodies over 1 MB, invalid UTF-8, huge or negative
counts, bad actor JWTs and ids with path characters each get the sensible 4xx with a JSON
{"error", "reason"} body, on the batch API, the actor API and the subscription views.
Kafka: the same kinds of bad DataAvailable records, mixed with valid events on the topic the `hub`
subscription reads, each land in the subscription's DLQ with their reason in hs-* headers, while
every valid event is saved in the Cosmos message hub exactly once. No 500, no crash: the worker
still answers valid requests at the end.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.client
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from confluent_kafka import Producer

from app.composite.errors import InvalidPayload
from app.composite.producer import CompositeProducer
from app.composite.routing import group_hash
from app.composite.store import MetadataStore
from app.dataavailable import DataAvailable, parse
from app.hub import MessageHub
from app.ordered.policy import OnDlq
from app.ordered.records import decode_internal
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.registry import SubscriptionRegistry
from tests.integration.web.worker import Worker, drop_database, start_worker, worker_env, worker_settings
from tests.support.waiting import async_wait_until

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

ADMIN_TOKEN = f"corpus-admin-{uuid.uuid4().hex}"
JWT_SECRET = f"corpus-jwt-secret-{uuid.uuid4().hex}"
ACTOR = "5790000000001"
MB = 1024 * 1024
Headers = Mapping[str, str | bytes]


# -- HTTP -----------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _token(claims: dict[str, Any], secret: str = JWT_SECRET, alg: str = "HS256") -> str:
    """A JWT signed by hand (any algorithm, any key length, or unsigned with alg none)."""
    signing_input = f"{_b64(orjson.dumps({'alg': alg, 'typ': 'JWT'}))}.{_b64(orjson.dumps(claims))}"
    if alg == "none":
        return signing_input + "."
    digest = {"HS256": hashlib.sha256, "HS512": hashlib.sha512}[alg]
    return f"{signing_input}.{_b64(hmac.new(secret.encode(), signing_input.encode(), digest).digest())}"


def _claims(**changes: Any) -> dict[str, Any]:
    # Built when pytest collects the module, which can be long before these cases run in a full
    # suite: valid tokens live a day so only the cases meant to be expired are.
    return {"sub": ACTOR, "exp": int(time.time()) + 86_400, **changes}


def _bearer(token: str | bytes) -> Headers:
    return {"Authorization": b"Bearer " + token if isinstance(token, bytes) else f"Bearer {token}"}


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
NONE: Headers = {}


def _actor(**changes: Any) -> Headers:
    return _bearer(_token(_claims(**changes)))


@dataclass(frozen=True)
class BadRequest:
    """One request of the corpus; `@BATCH@`/`@ESTIMATED@` stand for the fixture's open batches."""

    method: str
    path: str
    body: bytes | None
    headers: Headers
    status: int
    error: str


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


EXACT, ESTIMATED, ACK = "/api/v1/batch/exact", "/api/v1/batch/estimated", "/api/v1/batch/exact/items/ack"
ITEMS, DECR, PEEK, DEQUEUE = (
    "/api/v1/batch/exact/items",
    "/api/v1/batch/estimated/decr",
    "/api/peek",
    "/api/dequeue",
)
BAD, ID_BAD, NO_BATCH, UNAUTHORIZED = "InvalidInput", "MalformedItemId", "BatchNotFound", "Unauthorized"
NO_SUB, NO_GROUP = "UnknownSubscription", "UndecodableMessage"


def _case(
    name: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Headers = ADMIN,  # the worker has an admin token: reads need it too
    status: int = 400,
    error: str = BAD,
) -> object:
    return pytest.param(BadRequest(method, path, body, headers, status, error), id=name)


def _admin(
    name: str, method: str, path: str, body: bytes | None, status: int = 400, error: str = BAD
) -> object:
    """A request to an admin-guarded batch endpoint, carrying the admin token."""
    return _case(name, method, path, body, ADMIN, status, error)


def _refused(name: str, headers: Headers, method: str = "GET", path: str = PEEK) -> object:
    """An actor request whose credentials must be refused with 401."""
    return _case(name, method, path, None, headers, 401, UNAUTHORIZED)


def _over(name: str, path: str, body: bytes) -> object:
    assert len(body) > MB, name
    return _admin(name, "POST", path, body, 413, "RequestEntityTooLarge")


UNKNOWN_ITEMS = [f"@BATCH@:{uuid.UUID(int=i)}:{i}" for i in range(10_000)]  # ~0.5 MB, no such groups
HUGE = b"1" + b"0" * 30
BAD_JWT = _bearer(_token(_claims(), secret="another-secret-that-is-long-enough-for-hs256"))

CASES = [
    # malformed JSON
    _admin("malformed-json/exact-create", "POST", EXACT, b'{"userKey": '),
    _admin("malformed-json/items-unquoted-keys", "POST", ITEMS, b"{batchId: 1, items: 2}"),
    _admin("malformed-json/ack-truncated", "POST", ACK, b'{"batchItemIds": ['),
    _admin("malformed-json/estimated-trailing-comma", "POST", ESTIMATED, b'{"batchSize": 1,}'),
    _admin("malformed-json/estimated-nan", "POST", ESTIMATED, b'{"batchSize": NaN}'),
    _admin("malformed-json/decr-bare-word", "POST", DECR, b"nul"),
    _admin("malformed-json/items-empty-body", "POST", ITEMS, b""),
    # wrong JSON types
    _admin("wrong-type/items-body-is-array", "POST", ITEMS, b"[1, 2]"),
    _admin("wrong-type/estimated-body-is-string", "POST", ESTIMATED, b'"5"'),
    _admin("wrong-type/items-string", "POST", ITEMS, b'{"batchId": @BATCH@, "items": "10"}'),
    _admin("wrong-type/items-float", "POST", ITEMS, b'{"batchId": @BATCH@, "items": 1.5}'),
    _admin("wrong-type/items-bool", "POST", ITEMS, b'{"batchId": @BATCH@, "items": true}'),
    _admin("wrong-type/batch-id-object", "POST", ITEMS, b'{"batchId": {"id": 1}, "items": 1}'),
    _admin("wrong-type/user-key-number", "POST", EXACT, b'{"userKey": 5}'),
    _admin("wrong-type/ack-ids-string", "POST", ACK, b'{"batchItemIds": "@BATCH@:x:0"}'),
    _admin("wrong-type/ack-ids-numbers", "POST", ACK, b'{"batchItemIds": [1, 2]}', error=ID_BAD),
    _admin("wrong-type/batch-size-string", "POST", ESTIMATED, b'{"batchSize": "5"}'),
    _admin("wrong-type/decr-acks-object", "POST", DECR, b'{"acks": {"by": 1}}'),
    _admin("wrong-type/decr-ack-number", "POST", DECR, b'{"acks": [1]}'),
    _admin("wrong-type/decr-by-string", "POST", DECR, b'{"acks": [{"batchId": "@ESTIMATED@", "by": "1"}]}'),
    # missing fields
    _admin("missing/items", "POST", ITEMS, b'{"batchId": @BATCH@}'),
    _admin("missing/batch-id", "POST", ITEMS, b'{"items": 5}'),
    _admin("missing/ack-ids", "POST", ACK, b"{}"),
    _admin("missing/batch-size", "POST", ESTIMATED, b"{}"),
    _admin("missing/decr-acks", "POST", DECR, b"{}"),
    _admin("missing/decr-batch-id", "POST", DECR, b'{"acks": [{"by": 1}]}', error=ID_BAD),
    _admin("missing/expire-since", "DELETE", f"{EXACT}/open", None),
    _case("missing/dequeue-bundle-id", "DELETE", DEQUEUE, headers=_actor()),
    # bodies over 1 MB (the web server's limit)
    _over("oversize/exact-create-2mb", EXACT, _json({"userKey": "k" * 2 * MB})),
    _over("oversize/ack-1.5mb", ACK, _json({"batchItemIds": ["1:x:0"] * 200_000})),
    _over("oversize/items-10mb", ITEMS, b"[" + b"0," * 5 * MB + b"0]"),
    _over("oversize/decr-just-over", DECR, b" " * MB + b"{}"),
    # invalid UTF-8
    _admin("invalid-utf8/user-key", "POST", EXACT, b'{"userKey": "\xff\xfe"}'),
    _admin("invalid-utf8/ack-id", "POST", ACK, b'{"batchItemIds": ["\xc3\x28"]}'),
    _admin("invalid-utf8/overlong-slash", "POST", ESTIMATED, b'{"batchSize": "\xc0\xaf"}'),
    _admin("invalid-utf8/whole-body", "POST", DECR, b"\xff\xfe\xfd"),
    _case("invalid-utf8/exact-id-in-path", "GET", f"{EXACT}/%FF%FE"),
    _case("invalid-utf8/bundle-id", "GET", f"{PEEK}?bundleId=%FF%FE", headers=_actor()),
    _refused("invalid-utf8/actor-bearer", _bearer(b"\xff\xfe.\xc3\x28.x")),
    _case("invalid-utf8/admin-bearer", "POST", EXACT, b"{}", _bearer(b"\xff\xfe"), 401, UNAUTHORIZED),
    # huge, zero and negative counts; huge batches
    _admin("huge/items-10e12", "POST", ITEMS, b'{"batchId": @BATCH@, "items": 1000000000000}'),
    _admin("huge/items-10e30", "POST", ITEMS, b'{"batchId": @BATCH@, "items": ' + HUGE + b"}"),
    _admin("huge/items-1e400", "POST", ITEMS, b'{"batchId": @BATCH@, "items": 1e400}'),
    _admin("huge/items-negative", "POST", ITEMS, b'{"batchId": @BATCH@, "items": -5}'),
    _admin("huge/items-zero", "POST", ITEMS, b'{"batchId": @BATCH@, "items": 0}'),
    _admin("huge/batch-size-10e19", "POST", ESTIMATED, b'{"batchSize": 10000000000000000000}'),
    _admin("huge/batch-size-negative", "POST", ESTIMATED, b'{"batchSize": -1}'),
    _admin("huge/incr-by-10e30", "POST", f"{ESTIMATED}/@ESTIMATED@/incr?by={HUGE.decode()}", None),
    _admin("huge/incr-by-negative", "POST", f"{ESTIMATED}/@ESTIMATED@/incr?by=-3", None),
    _admin("huge/incr-by-not-integer", "POST", f"{ESTIMATED}/@ESTIMATED@/incr?by=1e3", None),
    _admin(
        "huge/decr-by-10e30", "POST", DECR, b'{"acks": [{"batchId": "@ESTIMATED@", "by": ' + HUGE + b"}]}"
    ),
    _admin(
        "huge/ack-10000-unknown-items",
        "POST",
        ACK,
        _json({"batchItemIds": UNKNOWN_ITEMS}),
        404,
        "ItemNotFound",
    ),
    _admin(
        "huge/items-to-unknown-batch", "POST", ITEMS, b'{"batchId": 98765432100, "items": 1}', 404, NO_BATCH
    ),
    _case("huge/exact-id-20-digits", "GET", f"{EXACT}/{'9' * 20}", status=404, error=NO_BATCH),
    _case("huge/exact-id-5000-digits", "GET", f"{EXACT}/{'9' * 5000}"),
    # ids with path characters, NUL, non-ASCII digits, very long ids
    _case("path/exact-id-encoded-slash", "GET", f"{EXACT}/1%2F2"),
    _case("path/exact-id-dotdot", "GET", f"{EXACT}/..%2F..%2Fetc%2Fpasswd"),
    _case("path/exact-id-nul", "GET", f"{EXACT}/1%00"),
    _case("path/exact-id-superscript-digit", "GET", f"{EXACT}/%C2%B2"),
    _case("path/exact-id-raw-slash", "GET", f"{EXACT}/1/2", status=404, error="NotFound"),
    _admin("path/exact-id-raw-dotdot", "DELETE", f"{EXACT}/../../../etc/passwd", None, 404, "NotFound"),
    _admin("path/close-id-encoded-slash", "POST", f"{EXACT}/close/1%2F..%2F2", None),
    _admin("path/delete-id-dotdot", "DELETE", f"{EXACT}/..%2Fstatus", None),
    _case("path/estimated-id-dotdot", "GET", f"{ESTIMATED}/..%2F..%2Fetc", error=ID_BAD),
    _admin("path/estimated-id-nul", "POST", f"{ESTIMATED}/%00/incr", None, error=ID_BAD),
    _case("path/estimated-id-4000-chars", "GET", f"{ESTIMATED}/{'a' * 4000}", error=ID_BAD),
    _admin("path/ack-id-dotdot", "POST", ACK, b'{"batchItemIds": ["../../etc/passwd"]}', error=ID_BAD),
    _admin("path/ack-id-group-dotdot", "POST", ACK, b'{"batchItemIds": ["1:../../x:0"]}', error=ID_BAD),
    _admin("path/decr-id-dotdot", "POST", DECR, b'{"acks": [{"batchId": "../x", "by": 1}]}', error=ID_BAD),
    _admin("path/expire-since-dotdot", "DELETE", f"{EXACT}/closed?since=..%2F..%2Fetc", None),
    _case("path/subscription-dotdot", "GET", "/subscriptions/..%2F..%2Fetc/lag", status=404, error=NO_SUB),
    _case("path/subscription-nul", "GET", "/subscriptions/x%00/blocked", status=404, error=NO_SUB),
    _case(
        "path/subscription-3000-chars", "GET", f"/subscriptions/{'n' * 3000}/lag", status=404, error=NO_SUB
    ),
    _case("path/subscription-group-300-bytes", "GET", f"/subscriptions/x/groups/{'g' * 300}", error=NO_GROUP),
    _case("path/peek-domain-dotdot", "GET", f"{PEEK}/..%2F..%2Fetc", headers=_actor()),
    _case("path/peek-domain-unknown", "GET", f"{PEEK}/weather", headers=_actor()),
    _case("path/peek-bundle-id-dotdot", "GET", f"{PEEK}?bundleId=..%2F..%2Fetc", headers=_actor()),
    _case(
        "query/peek-misspelt-bundle-id",
        "GET",
        f"{PEEK}?bundleid=0b6c1c8e-3d0e-4f57-9b7a-8f0d7f7b6a01",
        headers=_actor(),
    ),
    _case("query/dequeue-unknown-parameter", "DELETE", f"{DEQUEUE}?bundleId=x&force=1", headers=_actor()),
    _admin("query/incr-unknown-parameter", "POST", f"{ESTIMATED}/@ESTIMATED@/incr?by=1&times=2", None),
    _case("path/dequeue-bundle-id-nul", "DELETE", f"{DEQUEUE}?bundleId=%00", headers=_actor()),
    _case(
        "path/dequeue-bundle-id-5000-chars", "DELETE", f"{DEQUEUE}?bundleId={'a' * 5000}", headers=_actor()
    ),
    # actor JWTs: missing, invalid, expired; the admin token is no actor token and vice versa
    _refused("jwt/missing", NONE),
    _refused("jwt/basic-auth", {"Authorization": "Basic dXNlcjpwdw=="}),
    _refused("jwt/empty-bearer", {"Authorization": "Bearer "}),
    _refused("jwt/garbage", _bearer("not.a.jwt")),
    _refused("jwt/wrong-signature", BAD_JWT, path=f"{PEEK}/timeseries"),
    _refused("jwt/expired", _actor(exp=int(time.time()) - 60)),
    _refused("jwt/alg-none", _bearer(_token(_claims(), alg="none"))),
    _refused("jwt/hs512", _bearer(_token(_claims(), alg="HS512"))),
    _refused("jwt/no-subject", _bearer(_token({"exp": int(time.time()) + 86_400}))),
    _refused("jwt/subject-path", _actor(sub="../../etc/passwd")),
    _refused("jwt/subject-number", _actor(sub=5790000000001)),
    _refused("jwt/not-yet-valid", _actor(nbf=int(time.time()) + 3600)),
    _refused("jwt/admin-token", ADMIN),
    _refused(
        "jwt/expired-dequeue",
        _actor(exp=int(time.time()) - 60),
        "DELETE",
        f"{DEQUEUE}?bundleId={uuid.uuid4()}",
    ),
    _case("admin/missing-token", "POST", EXACT, b"{}", NONE, 401, UNAUTHORIZED),
    _case("admin/actor-jwt", "POST", EXACT, b"{}", _actor(), 401, UNAUTHORIZED),
    # a well-formed actor without data: nothing to dequeue
    _case(
        "unknown-recipient/dequeue",
        "DELETE",
        f"{DEQUEUE}?bundleId={uuid.uuid4()}",
        None,
        _actor(),
        404,
        "BundleNotFound",
    ),
]


def _send(
    worker: Worker, method: str, path: str, body: bytes | None, headers: Headers
) -> tuple[int, str, bytes]:
    """One raw HTTP request (path and header bytes sent exactly as given)."""
    url = urlsplit(worker.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        conn.close()


# -- the worker -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    worker: Worker
    settings: Settings  # the worker's isolated names: metadata and registry topics, Cosmos database
    subscription: Subscription
    batch_id: int
    estimated_id: str

    def fill(self, text: bytes) -> bytes:
        return text.replace(b"@BATCH@", str(self.batch_id).encode()).replace(
            b"@ESTIMATED@", self.estimated_id.encode()
        )


@pytest.fixture(scope="module")
def corpus(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    unique = uuid.uuid4().hex[:10]
    home = tmp_path_factory.mktemp("corpus-worker")
    env = worker_env(stack, unique, home, HUBSTREAM_ADMIN_TOKEN=ADMIN_TOKEN, HUB_JWT_SECRET=JWT_SECRET)
    settings = worker_settings(stack, env)
    metadata = MetadataStore.of(settings)
    registry = SubscriptionRegistry.of(settings)
    try:
        topic = f"corpus-da-{unique}"
        metadata.create(topic, 2)
        # skip_failed: a dead-lettered record does not hold back the later events of its recipient,
        # so valid events can sit right behind bad ones of the same recipient and partition and
        # must still all arrive. (With the default block_group they would follow the bad record
        # to DLQ by design - parked, not lost - which could hide a valid event wrongly refused.)
        subscription = ops.create(
            registry,
            metadata,
            f"corpus-hub-{unique}",
            topic,
            EndpointSpec("batch", "hub", timeout_s=60.0),
            on_dlq=OnDlq.SKIP_FAILED,
            start=True,
        )
    finally:
        registry.close()
        metadata.close()
    worker = start_worker(env, home)
    try:
        batch_id = worker.json("POST", EXACT, {"userKey": "corpus"}, ADMIN)["batchId"]
        worker.json("POST", ITEMS, {"batchId": batch_id, "items": 10}, ADMIN)
        estimated_id = worker.json("POST", ESTIMATED, {"batchSize": 5}, ADMIN)["batchId"]
        yield Corpus(worker, settings, subscription, batch_id, estimated_id)
    finally:
        worker.stop()
        asyncio.run(drop_database(settings))


# -- Part A: the HTTP corpus --------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_bad_request_gets_a_json_4xx_with_its_reason(corpus: Corpus, case: BadRequest) -> None:
    path = corpus.fill(case.path.encode()).decode()
    body = None if case.body is None else corpus.fill(case.body)
    status, content_type, raw = _send(corpus.worker, case.method, path, body, case.headers)
    assert (status, content_type.split(";")[0]) == (case.status, "application/json"), raw[:300]
    answer = orjson.loads(raw)
    assert answer["error"] == case.error, answer
    assert isinstance(answer["reason"], str) and answer["reason"].strip(), answer
    assert corpus.worker.proc.poll() is None, "the worker died"


# -- Part B: the Kafka corpus through the hub subscription ------------------------------------------

RECIPIENTS = ("5790000000001", "5790000000002", "5790000000003")
VALID_PER_RECIPIENT = 4
CASE_HEADER = "corpus-case"
# Kafka allows a header without a value; a record carrying such headers is still a valid event.
NULL_HEADERS: list[tuple[str, str | bytes | None]] = [("note", None), ("message-id", None)]


@dataclass(frozen=True)
class BadRecord:
    """A record the subscription must dead-letter; `key` None = no key at all."""

    name: str
    key: bytes | None
    payload: bytes
    error_class: str
    error: str  # part of the hs-error reason
    reason: str = "failed"  # hs-reason: "failed" (the sink refused it) or "undecodable"
    foreign: bool = False  # no hubstream producer writes it: produced raw to the storage topic


def _event(recipient: str, /, **changes: Any) -> dict[str, Any]:
    valid = DataAvailable(str(uuid.uuid4()), recipient, "timeseries", "RSM-012", 1000).to_json()
    return {**valid, **changes}


def _without(event: dict[str, Any], field: str) -> bytes:
    return orjson.dumps({k: v for k, v in event.items() if k != field})


def _sink_refuses(
    name: str,
    group: str,
    payload: bytes | dict[str, Any],
    error: str,
    cls: str = "InvalidInput",
    foreign: bool = False,
) -> BadRecord:
    """A record the hub sink refuses (hs-reason "failed")."""
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return BadRecord(name, group.encode(), data, cls, error, foreign=foreign)


def _undecodable(name: str, key: bytes | None) -> BadRecord:
    """A record without a usable group id (hs-reason "undecodable"), written by a foreign producer."""
    payload = orjson.dumps(_event(RECIPIENTS[0]))
    return BadRecord(
        name, key, payload, "UndecodableMessage", "no valid group id", "undecodable", foreign=True
    )


def _bad_records(first_of: dict[str, DataAvailable]) -> list[BadRecord]:
    a, b, c = RECIPIENTS
    bad_actor = "../../etc/passwd"
    conflicting = {**first_of[c].to_json(), "weight": 2000}  # same id, other content
    over_1mb = _event(a, padding="x" * (MB + 1024))  # valid but for its size
    return [
        _sink_refuses("malformed-json", a, b'{"id": "', "payload is not JSON"),
        _sink_refuses("not-an-object", b, b"[1, 2, 3]", "expected a JSON object"),
        _sink_refuses("empty-payload", c, b"", "payload is not JSON"),
        _sink_refuses("invalid-utf8-payload", a, b'{"id": "\xff\xfe"}', "not valid UTF-8"),
        _sink_refuses("wrong-type-weight", b, _event(b, weight="1000"), "'weight' has the wrong type"),
        _sink_refuses(
            "wrong-type-bundleable", c, _event(c, bundleable="yes"), "'bundleable' must be a boolean"
        ),
        _sink_refuses(
            "wrong-type-recipient", a, _event(a, recipient=5790000000001), "'recipient' has the wrong type"
        ),
        _sink_refuses("missing-origin", b, _without(_event(b), "origin"), "missing field 'origin'"),
        _sink_refuses("missing-id", c, _without(_event(c), "id"), "missing field 'id'"),
        _sink_refuses("weight-huge", a, _event(a, weight=10**12), "outside 1.."),
        _sink_refuses("weight-negative", b, _event(b, weight=-1), "outside 1.."),
        _sink_refuses("recipient-with-path", bad_actor, _event(bad_actor), "not a valid actor id"),
        _sink_refuses("recipient-not-the-group", c, _event("5790000099999"), "does not match group id"),
        _sink_refuses("id-with-path", a, _event(a, id="../../etc/passwd"), "is not a GUID"),
        _sink_refuses("origin-with-path", b, _event(b, origin="../x"), "is not one of"),
        _sink_refuses(
            "batch-item-id-with-path",
            c,
            _event(c, batch_item_id="../x"),
            "batchId:groupUuid",
            "MalformedItemId",
        ),
        _sink_refuses("same-id-other-content", c, conflicting, "different content", "DuplicateEventConflict"),
        _sink_refuses("over-1mb", a, over_1mb, "exceeds MAX_PAYLOAD_BYTES", foreign=True),
        _undecodable("no-key", None),
        _undecodable("key-not-utf8", b"\xff\xfe"),
        _undecodable("key-300-bytes", b"k" * 300),
    ]


def _produce_corpus(corpus: Corpus) -> tuple[dict[str, list[DataAvailable]], list[BadRecord]]:
    """Valid events and bad records interleaved per recipient, bad ones right between valid ones."""
    settings, topic = corpus.settings, corpus.subscription.topic
    valid = {r: [parse(_event(r)) for _ in range(VALID_PER_RECIPIENT)] for r in RECIPIENTS}
    bad = _bad_records({r: events[0] for r, events in valid.items()})
    metadata = MetadataStore.of(settings)
    storage = metadata.get(topic).current
    raw = Producer({"bootstrap.servers": settings.bootstrap, "message.max.bytes": 4 * MB})
    try:
        with CompositeProducer(settings, topic, store=metadata) as producer:
            with pytest.raises(InvalidPayload, match="MAX_PAYLOAD_BYTES"):  # the producer itself refuses it
                producer.produce(RECIPIENTS[0], next(r.payload for r in bad if r.name == "over-1mb"))
            for round_ in range(VALID_PER_RECIPIENT):
                for recipient in RECIPIENTS:
                    payload = orjson.dumps(valid[recipient][round_].to_json())
                    if round_ == 0:  # valid, from a foreign producer whose headers have no values
                        partition = storage.route(group_hash(recipient))
                        raw.produce(
                            storage.name, payload, recipient.encode(), partition, headers=NULL_HEADERS
                        )
                    else:
                        producer.produce(recipient, payload)
                producer.flush()
                for record in bad[round_::VALID_PER_RECIPIENT]:
                    headers = [(CASE_HEADER, record.name.encode())]
                    if record.foreign:  # straight to the storage topic, as a foreign producer could
                        key, routed = record.key, record.reason == "failed"  # decodable keys are routed
                        partition = storage.route(group_hash(key.decode())) if key and routed else 0
                        raw.produce(storage.name, record.payload, key, partition, headers=headers)
                    else:
                        assert record.key is not None
                        producer.produce(record.key.decode(), record.payload, headers=dict(headers))
                producer.flush()
                assert raw.flush(30) == 0
    finally:
        metadata.close()
    return valid, bad


def _dead_letters(corpus: Corpus) -> dict[str, list[dict[str, str]]]:
    """DLQ records by corpus case, with the failure the hs-* headers carry."""
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    metadata = MetadataStore.of(corpus.settings)
    try:
        records = ops.read_dlq(metadata, corpus.subscription, None, 1000)
    finally:
        metadata.close()
    for record in records:
        headers = dict(record.headers() or ())
        failure = decode_internal(record.headers()).failure
        assert failure is not None, headers
        name = headers.get(CASE_HEADER, b"<no case header>").decode()
        out[name].append(
            {"reason": failure.reason, "error_class": failure.error_class, "error": failure.error}
        )
    return out


async def _hub_depth(hub: MessageHub) -> dict[str, int]:
    return {r: sum((await hub.depth(r)).values()) for r in RECIPIENTS}


async def _drain(hub: MessageHub, actor: str) -> list[DataAvailable]:
    events: list[DataAvailable] = []
    while (bundle := await hub.peek(actor)) is not None:
        events += [saved.event for saved in bundle.events]
        await hub.dequeue(actor, bundle.bundle_id)
    return events


async def test_bad_records_go_to_dlq_with_reasons_and_every_valid_event_reaches_the_hub_once(
    corpus: Corpus,
) -> None:
    valid, bad = _produce_corpus(corpus)
    expected_depth = {r: len(events) for r, events in valid.items()}
    hub = await MessageHub.open(corpus.settings)
    try:
        lag_path = f"/subscriptions/{corpus.subscription.name}/lag"

        async def settled() -> bool:
            dead, depth = await asyncio.to_thread(_dead_letters, corpus), await _hub_depth(hub)
            # the offsets are committed after the states are written: lag 0 comes last
            lag = await asyncio.to_thread(corpus.worker.json, "GET", lag_path, None, ADMIN)
            caught_up = all(s["mqLag"] == 0 and s["rqLag"] == 0 for s in lag["shards"])
            return set(dead) >= {r.name for r in bad} and depth == expected_depth and caught_up

        await async_wait_until(settled, 90, "every bad record in DLQ, every valid one in the hub, lag 0", 1.0)
        assert corpus.worker.proc.poll() is None, corpus.worker.log()[-4000:]
        lag = corpus.worker.json("GET", lag_path, None, ADMIN)
        assert all(s["mqLag"] == 0 and s["rqLag"] == 0 for s in lag["shards"]), lag

        dead = await asyncio.to_thread(_dead_letters, corpus)
        assert sorted(dead) == sorted(r.name for r in bad), dead  # every bad record, nothing valid
        for record in bad:
            failures = dead[record.name]
            assert {f["reason"] for f in failures} == {record.reason}, (record.name, failures)
            assert {f["error_class"] for f in failures} == {record.error_class}, (record.name, failures)
            assert all(record.error in f["error"] for f in failures), (record.name, failures)

        for recipient, events in valid.items():
            saved = await _drain(hub, recipient)
            assert sorted(e.id for e in saved) == sorted(e.id for e in events), recipient  # each once
            assert {e.id: e for e in saved} == {e.id: e for e in events}, recipient  # as produced
    finally:
        await hub.close()


def test_the_worker_survived_the_corpus_and_still_serves(corpus: Corpus) -> None:
    worker = corpus.worker
    assert worker.proc.poll() is None, worker.log()[-4000:]
    batch = worker.json("GET", f"{EXACT}/{corpus.batch_id}", None, ADMIN)
    untouched = (batch["totalItems"], batch["pendingItems"], batch["isClosed"]) == (10, 10, False)
    assert untouched, batch  # none of the bad requests changed the open batch
    groups = worker.json("POST", ITEMS, {"batchId": corpus.batch_id, "items": 2}, ADMIN)["batchItemGroupIds"]
    item_ids = [f"{corpus.batch_id}:{g['id']}:{i}" for g in groups for i in range(g["upto"])]
    assert worker.json("POST", ACK, {"batchItemIds": item_ids}, ADMIN) == {"batchCompletions": []}
    estimated = worker.json("GET", f"{ESTIMATED}/{corpus.estimated_id}", None, ADMIN)
    assert (estimated["pending"], estimated["isClosed"]) == (5, False), estimated  # untouched
    status, _, raw = _send(worker, "GET", "/api/peek", None, _actor(sub="5790000000009"))
    assert status == 204, raw[:300]  # a valid actor with nothing waiting
    dashboard = worker.json("GET", "/api/dashboard", None, ADMIN)
    assert corpus.subscription.name in str(dashboard["subscriptions"]), dashboard["errors"]
    log = worker.log()
    for crash in ("unhandled error", "Error handling request", "failed; it restarts"):  # 500s, shard crashes
        assert crash not in log, log[log.index(crash) - 2000 : log.index(crash) + 4000]
