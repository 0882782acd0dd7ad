"""The fault-injection seam: free when off, fires on the Nth hit, and its catalog is complete."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import crashpoints
from app.crashpoints import InjectedFault, armed, crash_point, parse_spec
from app.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
# crash_point("name"), or a point named by the caller of a shared writer: point="name" (or
# claim_point="name" where one writer has several)
CALL = re.compile(r"""(?:crash_point\(\s*|\b(?:[a-z]+_)?point\s*=\s*)["']([a-z0-9_.]+)["']""")
DOC_ROW = re.compile(r"^\|\s*`([a-z0-9_.]+)`\s*\|", re.M)


def test_an_unarmed_point_does_nothing() -> None:
    crashpoints.disarm()
    for _ in range(3):
        crash_point("test.unarmed.point")


def test_raise_fires_on_the_nth_hit_only() -> None:
    with armed("test.raise.point", nth=3) as trigger:
        crash_point("test.raise.point")
        crash_point("test.raise.point")
        with pytest.raises(InjectedFault, match=r"test\.raise\.point"):
            crash_point("test.raise.point")
        crash_point("test.raise.point")  # after its hit it stays quiet
        assert trigger.fired and trigger.hits == 4
    crash_point("test.raise.point")  # disarmed on exit


def test_kill_ends_the_process_with_sigkill() -> None:
    code = (
        "from app import crashpoints\n"
        "crashpoints.arm('test.kill.point:2:kill')\n"
        "crashpoints.crash_point('test.kill.point')\n"
        "print('first', flush=True)\n"
        "crashpoints.crash_point('test.kill.point')\n"
        "print('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == -9
    assert done.stdout == "first\n"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("a.b", [("a.b", 1, "kill")]),
        ("a.b:3", [("a.b", 3, "kill")]),
        ("a.b:2:raise, c.d.e:1:kill", [("a.b", 2, "raise"), ("c.d.e", 1, "kill")]),
        ("", []),
    ],
)
def test_specs_parse(spec: str, expected: list[tuple[str, int, str]]) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec", ["nodots", "a.b:x", "a.b:0", "a.b:1:explode", "A.B"])
def test_bad_specs_name_the_setting(spec: str) -> None:
    with pytest.raises(ConfigError, match="HUBSTREAM_CRASH_AT"):
        parse_spec(spec)


def points_in_code() -> set[str]:
    found: set[str] = set()
    for folder in ("app", "agents", "tables", "spark_ingest"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "crashpoints.py":  # the seam itself; its docstring shows examples
                continue
            found.update(CALL.findall(path.read_text()))
    return found


def test_every_crash_point_in_the_code_is_in_docs_reliability_and_back() -> None:
    documented = set(DOC_ROW.findall((ROOT / "docs" / "reliability.md").read_text()))
    in_code = points_in_code()
    assert in_code, "no crash point found in the code"
    assert sorted(in_code - documented) == [], "crash points missing from docs/reliability.md"
    assert sorted(documented - in_code) == [], "docs/reliability.md names points the code lacks"


TEST_FILE = re.compile(r"tests/[\w/]+\.py")


def test_every_documented_point_names_a_test_that_arms_it() -> None:
    """Each row's tests column names at least one test file that exists and names the point (arms
    it, or lists it among the points it arms)."""
    unarmed = []
    for row in (ROOT / "docs" / "reliability.md").read_text().splitlines():
        point = DOC_ROW.match(row)
        if point is None:
            continue
        tests = [ROOT / t for t in TEST_FILE.findall(row.rstrip(" |").rsplit("|", 1)[-1])]
        if not any(t.exists() and point.group(1) in t.read_text() for t in tests):
            unarmed.append(point.group(1))
    assert unarmed == [], "rows whose named tests never arm their point"
