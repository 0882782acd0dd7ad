"""Named crash points: the one fault-injection seam every write to Kafka, Cosmos DB or MySQL passes.

Code that writes calls `crash_point("capability.operation.moment")` right before (or right
after) the write it names, e.g. `crash_point("hub.save.after_drawer")`. When nothing is armed,
the call is one dict lookup on an empty dict. A test (or the `HUBSTREAM_CRASH_AT` setting, for a
worker or pipeline process) arms one point to fire on its Nth hit:

- `kill`: SIGKILL of the whole process, as a power cut or OOM kill would;
- `raise`: `InjectedFault` out of the write, as a failed write (an I/O error) would.

Spec syntax: `NAME[:NTH[:ACTION]]`, several separated by commas, e.g.
`hub.save.after_drawer:3:kill,batch.changelog.send:1:raise`. NTH defaults to 1, ACTION to kill.

docs/reliability.md lists every point per capability; a unit test fails when a point in the
code is missing there, or the table names one the code no longer has.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from app.errors import ConfigError, HubstreamError

__all__ = [
    "Action",
    "InjectedFault",
    "arm",
    "armed",
    "crash_point",
    "disarm",
    "hits",
    "parse_spec",
]

Action = Literal["kill", "raise"]
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


class InjectedFault(HubstreamError):
    """A crash point armed with `raise` fired: the write it guards fails as an I/O error would."""

    retriable = True
    http_status = 503


@dataclass
class _Trigger:
    name: str
    nth: int
    action: Action
    hits: int = 0
    fired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_armed: dict[str, _Trigger] = {}


def crash_point(name: str) -> None:
    """Pass the crash point `name`; fires when it is armed and this is its Nth hit."""
    if not _armed:
        return
    trigger = _armed.get(name)
    if trigger is None:
        return
    with trigger.lock:
        trigger.hits += 1
        fire = trigger.hits == trigger.nth
        if fire:
            trigger.fired = True
    if not fire:
        return
    if trigger.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"injected fault at crash point {name} (hit {trigger.hits})")


def parse_spec(spec: str) -> list[tuple[str, int, Action]]:
    """Parse `NAME[:NTH[:ACTION]],...`; a malformed spec is a ConfigError naming HUBSTREAM_CRASH_AT."""
    out: list[tuple[str, int, Action]] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, rest = part.partition(":")
        nth_text, _, action = rest.partition(":")
        if not _NAME.match(name):
            raise ConfigError(f"HUBSTREAM_CRASH_AT: {name!r} is not a crash point name (a.b.c)")
        try:
            nth = int(nth_text) if nth_text else 1
        except ValueError:
            raise ConfigError(f"HUBSTREAM_CRASH_AT: hit count {nth_text!r} is not a number") from None
        if nth < 1:
            raise ConfigError("HUBSTREAM_CRASH_AT: the hit count starts at 1")
        action = action or "kill"
        if action not in ("kill", "raise"):
            raise ConfigError(f"HUBSTREAM_CRASH_AT: action {action!r} is not kill or raise")
        out.append((name, nth, "kill" if action == "kill" else "raise"))
    return out


def arm(spec: str | None) -> None:
    """Arm every point of `spec` (see the module docstring); None or "" arms nothing."""
    for name, nth, action in parse_spec(spec or ""):
        _armed[name] = _Trigger(name, nth, action)


def disarm() -> None:
    _armed.clear()


def hits(name: str) -> int:
    """How often the armed point `name` was passed (0 when it is not armed)."""
    trigger = _armed.get(name)
    return trigger.hits if trigger else 0


@contextmanager
def armed(name: str, *, nth: int = 1, action: Action = "raise") -> Iterator[_Trigger]:
    """Arm one point for the block (in-process tests); disarms it on exit."""
    trigger = _Trigger(name, nth, action)
    _armed[name] = trigger
    try:
        yield trigger
    finally:
        _armed.pop(name, None)
