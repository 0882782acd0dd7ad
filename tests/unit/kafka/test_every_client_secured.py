"""Every Kafka client hubstream builds gets the process's security settings: librdkafka
configurations start from `client_config` (no other code spells out "bootstrap.servers"), every
aiokafka client is given `kafka_security().aiokafka()`, and the Faust app its credentials. A
client built otherwise would connect in plaintext to a broker that wants TLS or SASL; this reads
the source, so a new construction site cannot slip past it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [p for folder in ("app", "agents", "tables", "spark_ingest") for p in (ROOT / folder).rglob("*.py")]
CONFIG_BUILDER = ROOT / "app" / "kafka_security.py"


def _trees() -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in SOURCES]


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def test_no_librdkafka_configuration_is_written_but_by_client_config() -> None:
    spelled = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in _trees()
        if path != CONFIG_BUILDER
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "bootstrap.servers" for k in node.keys)
    ]
    assert not spelled, f"librdkafka configurations built without client_config: {spelled}"


def test_every_aiokafka_client_and_the_faust_app_get_the_security() -> None:
    unsecured: list[str] = []
    seen = 0
    for path, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _called(node)
            if name.startswith("AIOKafka"):
                seen += 1
                spread = [k.value for k in node.keywords if k.arg is None]
                if not any(isinstance(v, ast.Call) and _called(v) == "aiokafka" for v in spread):
                    unsecured.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
            elif (
                name == "App"
                and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func) == "faust.App"
            ):
                seen += 1
                if "broker_credentials" not in {k.arg for k in node.keywords}:
                    unsecured.append(f"{path.relative_to(ROOT)}:{node.lineno} faust.App")
    assert seen >= 2, "the scan found no aiokafka client or Faust app: it no longer reads the code"
    assert not unsecured, f"clients built without the Kafka security: {unsecured}"
