"""The ordered-delivery engine (Varadhi): at-least-once delivery in order per group, with a retry
queue (RQ) and a dead-letter queue (DLQ), decided by the GroupState rules.

Two hosts run it: the subscription platform (`app.subscription`: subscriptions created with the
CLI or API and run by `hubstream worker` in shards) and the consumer library (`app.consumer`: any
ordering key, scaled by running copies). Ports (`app.ordered.ports`) keep the engine free of
Kafka; `app.ordered.memory` has in-memory fakes.
"""

from app.ordered.engine import Engine, Outcome
from app.ordered.errors import CopyRefused, DeliveryFailed, InvalidPolicy, UndecodableMessage
from app.ordered.policy import Backoff, OnDlq, RetryPolicy
from app.ordered.ports import Deliver, GroupStates, Queues
from app.ordered.rules import Action, GroupState, MessageState, Position
from app.ordered.work import RecordStub, SourceRecord, Work

__all__ = [
    "Action",
    "Backoff",
    "CopyRefused",
    "Deliver",
    "DeliveryFailed",
    "Engine",
    "GroupState",
    "GroupStates",
    "InvalidPolicy",
    "MessageState",
    "OnDlq",
    "Outcome",
    "Position",
    "Queues",
    "RecordStub",
    "RetryPolicy",
    "SourceRecord",
    "UndecodableMessage",
    "Work",
]
