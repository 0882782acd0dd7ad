"""Consumer as a library (the Varadhi design, "Consumer as a library"): the subscription's ordering,
retry and dead-letter guarantees for any Kafka topic, in the service that imports it.

    from app.consumer import ConsumerSettings, KeyedConsumer, Message, PermanentError

    async def handle(message: Message) -> None:
        ...  # raise RetriableError (or anything) to retry later, PermanentError to dead-letter

    await KeyedConsumer(ConsumerSettings(name="orders", topic="orders", bootstrap="..."), handle).run()

Run more copies with the same name to scale; see docs/consumer.md for the guarantees.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from app.consumer.kafka import KeyedConsumer
from app.consumer.members import Member
from app.consumer.model import (
    ConsumerSettings,
    Filter,
    Handler,
    KeyOf,
    Message,
    OnDlq,
    PermanentError,
    RetriableError,
    RetryPolicy,
    ThrottlePolicy,
    key_from_header,
    record_key,
)
from app.consumer.stats import ConsumerStats

__all__ = [
    "ConsumerSettings",
    "ConsumerStats",
    "Filter",
    "Handler",
    "KeyOf",
    "KeyedConsumer",
    "Member",
    "Message",
    "OnDlq",
    "PermanentError",
    "RetriableError",
    "RetryPolicy",
    "ThrottlePolicy",
    "blocking",
    "key_from_header",
    "record_key",
    "run_forever",
]


def blocking(fn: Callable[[Message], None]) -> Handler:
    """A plain function as a handler: each call runs in a worker thread."""

    async def handle(message: Message) -> None:
        await asyncio.to_thread(fn, message)

    return handle


def run_forever(settings: ConsumerSettings, handler: Handler) -> ConsumerStats:
    """Run one copy until SIGINT or SIGTERM (the sync entry point); returns its counts."""
    consumer = KeyedConsumer(settings, handler)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, consumer.stop)
        await consumer.run()

    asyncio.run(main())
    return consumer.stats
