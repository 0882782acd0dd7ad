"""Pipeline definitions, from a YAML file or a Python module.

YAML::

    name: mirror
    reader: {type: composite, topic: data-available}
    writers:
      - name: mysql
        type: mysql
        table: data_available
        steps:                     # ordered chain; or the shorthand `namespace:` + `transforms:`
          - namespace: "^data-available$"
          - transform: examples.pipelines.transforms:flatten
        errors_tolerance: none     # all: failed transforms/conversions go to the dead-letter topic

A Python module defines `PIPELINE`: a `PipelineDefinition` or the same mapping as the YAML
(transforms may then be callables).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.pipeline.chain import Branch, NamespaceFilter, Step, Transform, TransformStep
from app.pipeline.errors import InvalidDefinition, UnknownWriter
from app.pipeline.tolerance import ErrorsTolerance

__all__ = [
    "READER_OPTIONS",
    "WRITER_OPTIONS",
    "ComponentSpec",
    "PipelineDefinition",
    "WriterSpec",
    "definition_from_mapping",
    "load_definition",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
# Required options per component type.
READER_OPTIONS: dict[str, tuple[str, ...]] = {
    "composite": ("topic",),
    "mysql": ("tables",),
    "binlog": ("tables",),
    "cosmos": ("container",),
    "jsonl": ("path",),
}
WRITER_OPTIONS: dict[str, tuple[str, ...]] = {
    "cosmos": ("container",),
    "mysql": ("table",),
    "kafka": ("topic",),
    "jsonl": ("path",),
}


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    type: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WriterSpec:
    name: str
    component: ComponentSpec
    branch: Branch
    errors_tolerance: ErrorsTolerance = ErrorsTolerance.NONE

    def __post_init__(self) -> None:  # a Python definition may give the tolerance as text
        tolerance = ErrorsTolerance.parse(self.errors_tolerance, f"writer {self.name}")
        object.__setattr__(self, "errors_tolerance", tolerance)


@dataclass(frozen=True, slots=True)
class PipelineDefinition:
    name: str
    reader: ComponentSpec
    writers: tuple[WriterSpec, ...]
    batch_size: int = 1000
    batch_wait_s: float = 0.2
    flush_interval_s: float | None = None  # None: settings.offset_flush_interval_s
    shutdown_timeout_s: float = 30.0
    restart_after_s: float = 0.0  # 0: a stopped writer waits for `pipeline resume` or a restart

    def writer(self, name: str) -> WriterSpec:
        for spec in self.writers:
            if spec.name == name:
                return spec

        raise UnknownWriter(f"pipeline {self.name} has no writer {name!r}")


def _component(raw: Any, kinds: dict[str, tuple[str, ...]], where: str, chain_keys: bool) -> ComponentSpec:
    if not isinstance(raw, Mapping) or "type" not in raw:
        raise InvalidDefinition(f"{where}: expected a mapping with a 'type'")
    kind = str(raw["type"])
    if kind not in kinds:
        raise InvalidDefinition(f"{where}: unknown type {kind!r}; one of {sorted(kinds)}")
    missing = [key for key in kinds[kind] if key not in raw]
    if missing:
        raise InvalidDefinition(f"{where}: type {kind} needs {', '.join(missing)}")
    reserved = (
        {"type", "name", "steps", "namespace", "transforms", "errors_tolerance"} if chain_keys else {"type"}
    )
    options = {k: v for k, v in raw.items() if k not in reserved}
    return ComponentSpec(kind, options)


def _resolve_transform(ref: Any, base_dir: Path | None, where: str) -> TransformStep:
    if callable(ref):
        return TransformStep(getattr(ref, "__name__", repr(ref)), ref)
    if not isinstance(ref, str) or ":" not in ref:
        raise InvalidDefinition(f"{where}: transform {ref!r} must be 'module:function' or 'file.py:function'")
    module_ref, _, attr = ref.rpartition(":")
    try:
        if module_ref.endswith(".py"):
            path = Path(module_ref)
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            module = _import_file(path)
        else:
            module = importlib.import_module(module_ref)
        function: Transform = getattr(module, attr)
    except Exception as exc:  # the user's module ran: a syntax error, or anything it raised
        raise InvalidDefinition(f"{where}: cannot load transform {ref!r}: {exc!r}") from exc
    if not callable(function):
        raise InvalidDefinition(f"{where}: {ref!r} is not callable")
    return TransformStep(ref, function)


def _steps(raw: Mapping[str, Any], base_dir: Path | None, where: str) -> tuple[Step, ...]:
    steps: list[Step] = []
    try:
        if "steps" in raw:
            if not isinstance(raw["steps"], Sequence) or isinstance(raw["steps"], str):
                raise InvalidDefinition(f"{where}: steps must be a list")
            for index, step in enumerate(raw["steps"]):
                if isinstance(step, Mapping) and set(step) == {"namespace"}:
                    steps.append(NamespaceFilter(str(step["namespace"])))
                elif isinstance(step, Mapping) and set(step) == {"transform"}:
                    steps.append(_resolve_transform(step["transform"], base_dir, f"{where}.steps[{index}]"))
                elif callable(step):
                    steps.append(_resolve_transform(step, base_dir, f"{where}.steps[{index}]"))
                else:
                    raise InvalidDefinition(
                        f"{where}.steps[{index}]: expected {{namespace: ...}} or {{transform: ...}}"
                    )
        else:
            steps.append(NamespaceFilter(str(raw.get("namespace", ".*"))))
            transforms = raw.get("transforms") or ()
            if not isinstance(transforms, Sequence) or isinstance(transforms, str):
                raise InvalidDefinition(f"{where}: transforms must be a list, got {transforms!r:.60}")
            for index, ref in enumerate(transforms):
                steps.append(_resolve_transform(ref, base_dir, f"{where}.transforms[{index}]"))
    except re.error as exc:
        raise InvalidDefinition(f"{where}: bad namespace regex: {exc}") from exc
    return tuple(steps) or (NamespaceFilter(),)


def _positive(raw: Mapping[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise InvalidDefinition(f"{key} must be a non-negative number, got {value!r}")
    return float(value)


def definition_from_mapping(raw: Any, base_dir: Path | None = None) -> PipelineDefinition:
    if not isinstance(raw, Mapping):
        raise InvalidDefinition("a pipeline definition is a mapping with name, reader and writers")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidDefinition(f"name {name!r} must be 1-100 letters, digits, '_' or '-'")
    reader = _component(raw.get("reader"), READER_OPTIONS, "reader", chain_keys=False)
    writers_raw = raw.get("writers")
    if not isinstance(writers_raw, Sequence) or isinstance(writers_raw, str) or not writers_raw:
        raise InvalidDefinition("writers must be a non-empty list")
    writers: list[WriterSpec] = []
    for index, item in enumerate(writers_raw):
        where = f"writers[{index}]"
        component = _component(item, WRITER_OPTIONS, where, chain_keys=True)
        writer_name = item.get("name")
        if not isinstance(writer_name, str) or not _NAME.match(writer_name):
            raise InvalidDefinition(
                f"{where}: name {writer_name!r} must be 1-100 letters, digits, '_' or '-'"
            )
        if any(w.name == writer_name for w in writers):
            raise InvalidDefinition(f"{where}: writer name {writer_name!r} is used twice")
        tolerance = ErrorsTolerance.parse(item.get("errors_tolerance", "none"), where)
        branch = Branch(writer_name, _steps(item, base_dir, where))
        writers.append(WriterSpec(writer_name, component, branch, tolerance))
    batch_size = raw.get("batch_size", 1000)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InvalidDefinition(f"batch_size must be a positive integer, got {batch_size!r}")
    flush = raw.get("flush_interval_s")
    return PipelineDefinition(
        name=name,
        reader=reader,
        writers=tuple(writers),
        batch_size=batch_size,
        batch_wait_s=_positive(raw, "batch_wait_s", 0.2),
        flush_interval_s=None if flush is None else _positive(raw, "flush_interval_s", 1.0),
        shutdown_timeout_s=_positive(raw, "shutdown_timeout_s", 30.0),
        restart_after_s=_positive(raw, "restart_after_s", 0.0),
    )


def _import_file(path: Path) -> Any:
    module_name = f"hubstream_pipeline_{abs(hash(str(path.resolve())))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]  # not half a module for the next load to find
        raise
    return module


def load_definition(path: Path) -> PipelineDefinition:
    """Load a pipeline from a .yaml/.yml file or a .py module defining PIPELINE."""
    if not path.is_file():
        raise InvalidDefinition(f"{path}: no such file")
    if path.suffix in {".yaml", ".yml"}:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise InvalidDefinition(f"{path}: invalid YAML: {exc}") from exc
        return definition_from_mapping(raw, path.parent)
    if path.suffix == ".py":
        try:
            module = _import_file(path)
        except Exception as exc:
            raise InvalidDefinition(f"{path}: cannot import: {exc}") from exc
        value = getattr(module, "PIPELINE", None)
        if isinstance(value, PipelineDefinition):
            return value
        if value is None:
            raise InvalidDefinition(f"{path}: defines no PIPELINE")
        return definition_from_mapping(value, path.parent)
    raise InvalidDefinition(f"{path}: expected a .yaml, .yml or .py file")
