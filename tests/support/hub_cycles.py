"""Cycles of hub use for the bounded-storage tests (in memory and on the Cosmos endpoint): saves of
two recipients (some dying before their release and never retried), peeks and dequeues, then the
reclaim sweep, checking after each cycle that what is stored stays within the unacknowledged
events plus a constant per recipient, and that the ledgers stay small."""

from __future__ import annotations

import random
import uuid
from collections.abc import Awaitable, Callable

import orjson
import pytest

from app.crashpoints import InjectedFault, armed
from app.dataavailable import DataAvailable
from app.hub import MessageHub
from app.hub.documents import ledger_doc

__all__ = ["LEDGER_BYTES", "run_cycles"]

LEDGER_BYTES = 1_000  # a ledger of a few cabinets and no void left


async def run_cycles(
    hub: MessageHub,
    recipients: tuple[str, ...],
    cycles: int,
    *,
    stored: Callable[[], Awaitable[int]],
    pass_window: Callable[[], None],
    per_recipient: int,
    seed: int = 7,
) -> int:
    """Run the cycles; the most documents kept beyond the unacknowledged events at any check."""
    rng = random.Random(seed)
    largest = 0
    for cycle in range(cycles):
        for recipient in recipients:
            batch = [
                DataAvailable(
                    str(uuid.UUID(int=rng.getrandbits(128))),
                    recipient,
                    rng.choice(("timeseries", "masterdata")),
                    "mt",
                    1024,
                )
                for _ in range(rng.randint(1, 7))
            ]
            if rng.random() < 0.3:  # dies before its release, never retried: its claim is voided
                with armed("hub.save.release", nth=1, action="raise"), pytest.raises(InjectedFault):
                    await hub.save(batch)
            else:
                await hub.save(batch)
            for _ in range(rng.randint(0, 3)):
                bundle = await hub.peek(recipient)
                if bundle is None:
                    break
                await hub.dequeue(recipient, bundle.bundle_id)
        pass_window()  # save leases and the dedup window pass
        await hub.reclaim()
        unacked = sum([sum((await hub.depth(r)).values()) for r in recipients])
        documents = await stored()
        largest = max(largest, documents - unacked)
        bound = unacked + per_recipient * len(recipients)
        assert documents <= bound, f"cycle {cycle}: {documents} documents for {unacked} unacknowledged"
        for recipient in recipients:
            ledger, _ = await hub.repository.ledgers.read(recipient)
            size = len(orjson.dumps(ledger_doc(ledger)))
            assert size <= LEDGER_BYTES, f"cycle {cycle}: the ledger of {recipient} holds {size} bytes"
            assert len(ledger.voids) <= 1, f"cycle {cycle}: older voids left for {recipient}"
    return largest
