"""Faust timers that outlive a failed round. Faust ends a timer for good when one of its calls
raises, and drops it when a call ends cancelled: a broker that did not answer, or a wait inside
the call that something else cancelled (a task that ended cancelled, a client's own cancelled
future), would stop that timer for as long as the worker runs. Every timer of hubstream is made
with `every`: such a round is logged and the next one comes as usual; only the timer's own
cancellation (the worker stopping) ends it."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from app.waiting import being_cancelled

__all__ = ["every", "surviving"]

log = logging.getLogger(__name__)

Round = Callable[[], Coroutine[Any, Any, None]]


def surviving(name: str, round_: Round) -> Round:
    """`round_`, with a failed or cut round logged instead of ending the timer."""

    @functools.wraps(round_)
    async def guarded() -> None:
        try:
            await round_()
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            log.exception("timer %s: a wait inside was cancelled; the next round comes as usual", name)
        except Exception:
            log.exception("timer %s: round failed; the next round comes as usual", name)

    return guarded


def every(app: Any, interval_s: float, name: str, *, on_leader: bool = False) -> Callable[[Round], Round]:
    """`@app.timer(interval_s, name=name, on_leader=on_leader)` over `surviving(name, ...)`
    (`on_leader`: only the worker group's leader runs the rounds)."""

    def register(round_: Round) -> Round:
        guarded = surviving(name, round_)
        app.timer(interval_s, name=name, on_leader=on_leader)(guarded)
        return guarded

    return register
