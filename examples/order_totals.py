"""An example service on the consumer library: keeps a running total per customer.

Orders of one customer (the record key) are applied one at a time, in order; many customers at
once. A malformed order is dead-lettered (PermanentError); a failure of the (pretend) store is
retried later, and that customer's later orders wait behind it.

    hubstream topic create orders --partitions 8        # or any existing topic
    hubstream consumer run examples.order_totals:handle --topic orders --name order-totals
    hubstream consumer members order-totals
    hubstream consumer dlq order-totals
"""

from __future__ import annotations

import asyncio
import random

import orjson

from app.consumer import Message, PermanentError, RetriableError

totals: dict[str, int] = {}


async def handle(message: Message) -> None:
    try:
        order = orjson.loads(message.value or b"")
        amount = int(order["amount"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise PermanentError(f"not an order: {exc}") from exc
    await asyncio.sleep(0.005)  # the store's round trip
    if random.random() < 0.01:
        raise RetriableError("store timed out")
    totals[message.ordering_key] = totals.get(message.ordering_key, 0) + amount
