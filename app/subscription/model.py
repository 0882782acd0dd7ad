"""A subscription as a pure value (the Varadhi design, "Subscription"): the MQ it reads, its RQ and DLQ
composite topics, retry policy, on-DLQ policy, endpoint and shard count.

No I/O here; `app.subscription.registry` persists these values in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from app.composite.model import check_partition_count
from app.ordered.policy import OnDlq, RetryPolicy
from app.subscription.errors import InvalidSubscription
from app.subscription.forwarded_headers import check_allow_list

__all__ = [
    "ENDPOINT_KINDS",
    "EndpointSpec",
    "Status",
    "Subscription",
    "check_shard_count",
]

ENDPOINT_KINDS = ("http", "callable", "batch")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,150}$")


class Status(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"


def check_shard_count(partitions: int, shard_count: int, what: str) -> None:
    if shard_count < 1 or partitions % shard_count:
        raise InvalidSubscription(
            f"shard count {shard_count} does not divide the {partitions} partitions of {what}"
        )


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """`http` POSTs to `target` (a URL); `callable` calls the in-process sink registered as `target`
    (`register_sink`); `batch` calls the batch sink registered as `target` (`register_batch_sink`)
    with up to SUBSCRIPTION_BATCH_MAX messages of one shard at once."""

    kind: str
    target: str
    timeout_s: float = 10.0
    # `http`: the only record headers sent, when given (`app.subscription.forwarded_headers`).
    forward_headers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ENDPOINT_KINDS:
            raise InvalidSubscription(
                f"endpoint kind must be one of {', '.join(ENDPOINT_KINDS)}, not {self.kind!r}"
            )
        if self.kind == "http" and not self.target.startswith(("http://", "https://")):
            raise InvalidSubscription(f"http endpoint needs an http(s):// URL, got {self.target!r}")
        if not self.target:
            raise InvalidSubscription("endpoint target is empty")
        if not 0 < self.timeout_s <= 600:
            raise InvalidSubscription("endpoint timeout_s must be in (0, 600]")
        if self.forward_headers is not None:
            if self.kind != "http":
                raise InvalidSubscription("forwarded headers apply to http endpoints only")
            object.__setattr__(self, "forward_headers", check_allow_list(self.forward_headers))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "target": self.target, "timeout_s": self.timeout_s}
        if self.forward_headers is not None:
            out["forward_headers"] = list(self.forward_headers)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndpointSpec:
        allow = data.get("forward_headers")
        return cls(
            str(data["kind"]),
            str(data["target"]),
            float(data.get("timeout_s", 10.0)),
            tuple(str(name) for name in allow) if isinstance(allow, list) else None,
        )


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    topic: str  # the MQ composite topic
    endpoint: EndpointSpec
    shard_count: int = 1
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_dlq: OnDlq = OnDlq.BLOCK_GROUP
    status: Status = Status.STOPPED
    # Bumped by change-shards and offset resets: runners of an older epoch stop and rebuild.
    epoch: int = 0
    version: int = 0
    # Set once by `create`: a subscription deleted and created again under the same name is a new
    # one, with its own consumer group and group states (none of the old one's come back).
    incarnation: str = ""
    # Set while change-shards holds a running subscription stopped: running the command again
    # after a cut resumes it, as one clean run would have.
    resume_after_change: bool = False

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidSubscription(
                f"subscription name {self.name!r} must be 1-151 letters, digits, '_' or '-'"
            )
        if self.shard_count < 1:
            raise InvalidSubscription("shard_count must be >= 1")

    @property
    def rq_topic(self) -> str:
        return f"{self.name}-rq"

    @property
    def dlq_topic(self) -> str:
        return f"{self.name}-dlq"

    @property
    def consumer_group(self) -> str:
        return f"hubstream-sub-{self.state_scope}"

    @property
    def state_scope(self) -> str:
        """What its group states are keyed by: the name, and the incarnation when it has one
        (`.` cannot be part of a name, so no two subscriptions share a scope)."""
        return f"{self.name}.{self.incarnation}" if self.incarnation else self.name

    def internal_partitions(self, requested: int | None) -> int:
        """RQ/DLQ partitions: a multiple of shard_count that is an allowed partition count."""
        count = requested or self.shard_count
        if count % self.shard_count:
            raise InvalidSubscription(
                f"RQ/DLQ partitions {count} are not a multiple of shard count {self.shard_count}"
            )
        return check_partition_count(count)

    def bump(self, **changes: Any) -> Subscription:
        return replace(self, version=self.version + 1, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic": self.topic,
            "endpoint": self.endpoint.to_json(),
            "shard_count": self.shard_count,
            "retry": self.retry.to_json(),
            "on_dlq": self.on_dlq.value,
            "status": self.status.value,
            "epoch": self.epoch,
            "version": self.version,
            "incarnation": self.incarnation,
            "resume_after_change": self.resume_after_change,
            "rq_topic": self.rq_topic,
            "dlq_topic": self.dlq_topic,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Subscription:
        try:
            return cls(
                name=str(data["name"]),
                topic=str(data["topic"]),
                endpoint=EndpointSpec.from_json(data["endpoint"]),
                shard_count=int(data.get("shard_count", 1)),
                retry=RetryPolicy.from_json(data.get("retry", {})),
                on_dlq=OnDlq(data.get("on_dlq", "block_group")),
                status=Status(data.get("status", "stopped")),
                epoch=int(data.get("epoch", 0)),
                version=int(data.get("version", 0)),
                incarnation=str(data.get("incarnation", "")),
                resume_after_change=bool(data.get("resume_after_change", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidSubscription(f"bad subscription definition: {exc!r}") from exc
