"""The usage example in docs/eventstore.md runs as written (on the in-memory storage)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

from app.eventstore import Cache, EventStore, MemoryStreamStorage, Snapshot

DOC = Path(__file__).resolve().parents[3] / "docs" / "eventstore.md"


def example_namespace() -> dict[str, Any]:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None, "docs/eventstore.md lost its python example"
    definitions = code.group(1).split("async def main")[0]
    module = types.ModuleType("eventstore_docs_example")
    sys.modules[module.__name__] = module  # dataclasses and type hints resolve through it
    exec(compile(definitions, str(DOC), "exec"), module.__dict__)
    return module.__dict__


async def test_bundle_lifecycle_example_peeks_and_dequeues() -> None:
    ns = example_namespace()
    bundles = EventStore(MemoryStreamStorage()).category(
        "Bundle", ns["bundles_decider"], ns["codec"], access=Snapshot(), cache=Cache()
    )
    stream = "Bundle-5790000000001"
    after = await bundles.transact(stream, ns["Peek"]("b-1", ("e1", "e2")))
    assert after.state.bundle_id == "b-1" and after.version == 1
    again = await bundles.transact(stream, ns["Peek"]("b-2", ("e3",)))  # idempotent while b-1 is open
    assert again.state.bundle_id == "b-1" and again.version == 1
    assert await bundles.query(stream, lambda s: s.bundle_id) == "b-1"
    dequeued = ns["BundleDequeued"]
    existed = await bundles.decide(
        stream, lambda s: (s.bundle_id == "b-1", [dequeued("b-1")] if s.bundle_id == "b-1" else [])
    )
    assert existed is True
    assert (await bundles.load(stream)).state == ns["OpenBundle"](None, ())
