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
        retry: {attempts: 5, min_backoff_s: 1, max_backoff_s: 60}   # a failed write, record by record

A Python module defines `PIPELINE`: a `PipelineDefinition` or the same mapping as the YAML
(transforms may then be callables).

A mapping is validated by the models of `app.pipeline.definition_models` (unknown keys and wrong
types refused, every problem reported at once with its path) and transforms are loaded, before the
runtime's `PipelineDefinition` is built.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from app.pipeline.builtin_transforms import omit, pick, rename, skip
from app.pipeline.chain import Branch, NamespaceFilter, Step, Transform, TransformStep
from app.pipeline.definition_errors import problems
from app.pipeline.definition_models import (
    CHAIN_KEYS,
    READER_MODELS,
    WRITER_MODELS,
    NamespaceStepModel,
    OmitStepModel,
    PickStepModel,
    PipelineModel,
    RenameStepModel,
    SkipStepModel,
    StepModel,
)
from app.pipeline.errors import InvalidDefinition, UnknownWriter
from app.pipeline.tolerance import ErrorsTolerance, WriteRetry

__all__ = [
    "READER_OPTIONS",
    "WRITER_OPTIONS",
    "ComponentSpec",
    "PipelineDefinition",
    "WriterSpec",
    "definition_from_mapping",
    "load_definition",
]


def _required(models: Mapping[str, type[BaseModel]]) -> dict[str, tuple[str, ...]]:
    return {
        kind: tuple(k for k, f in model.model_fields.items() if f.is_required() and k not in {"type", "name"})
        for kind, model in models.items()
    }


# Required options per component type.
READER_OPTIONS: dict[str, tuple[str, ...]] = _required(READER_MODELS)
WRITER_OPTIONS: dict[str, tuple[str, ...]] = _required(WRITER_MODELS)


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
    retry: WriteRetry | None = None  # a failed write tried again record by record first

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


def _resolve_transform(ref: Any, base_dir: Path | None) -> TransformStep:
    if callable(ref):
        return TransformStep(getattr(ref, "__name__", repr(ref)), ref)
    module_ref, _, attr = str(ref).rpartition(":")
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
        raise ValueError(f"cannot load transform {ref!r}: {exc!r}") from exc
    if not callable(function):
        raise ValueError(f"{ref!r} is not callable")
    return TransformStep(str(ref), function)


def _steps(writer: Any) -> tuple[Step, ...]:
    """The writer's chain; its transforms were loaded in validation (TransformStep)."""
    steps: list[Step] = []
    if writer.steps is not None:
        for step in writer.steps:
            steps.append(_step(step))
    else:
        steps.append(NamespaceFilter(".*" if writer.namespace is None else writer.namespace))
        steps.extend(writer.transforms or ())
    return tuple(steps) or (NamespaceFilter(),)


def _step(model: StepModel) -> Step:
    """A chain step from its definition (a transform was loaded in validation)."""
    if isinstance(model, NamespaceStepModel):
        return NamespaceFilter(model.namespace)
    if isinstance(model, PickStepModel):
        return pick(model.pick)
    if isinstance(model, OmitStepModel):
        return omit(model.omit)
    if isinstance(model, RenameStepModel):
        return rename(model.rename)
    if isinstance(model, SkipStepModel):
        return skip(model.skip.field, model.skip.operator, model.skip.match)
    transform: Step = model.transform
    return transform


def _options(model: BaseModel, reserved: frozenset[str]) -> dict[str, Any]:
    """What the definition set (a single key column already a list), for the reader or sink."""
    return model.model_dump(exclude=set(reserved), exclude_unset=True, exclude_none=True)


def _twice(raw: Any) -> list[str]:
    writers = raw.get("writers") if isinstance(raw, Mapping) else None
    if not isinstance(writers, list | tuple):
        return []
    names = [w.get("name") for w in writers if isinstance(w, Mapping) and isinstance(w.get("name"), str)]
    return [f"writers[{i}]: writer name {n!r} is used twice" for i, n in enumerate(names) if n in names[:i]]


def definition_from_mapping(raw: Any, base_dir: Path | None = None) -> PipelineDefinition:
    """Validate a definition (every problem at once, in one InvalidDefinition) and build it."""
    context = {"load_transform": lambda ref: _resolve_transform(ref, base_dir)}
    try:
        model = PipelineModel.model_validate(raw, context=context)
    except ValidationError as exc:
        raise InvalidDefinition(*problems(exc, raw), *_twice(raw)) from None
    twice = _twice(raw)
    if twice:
        raise InvalidDefinition(*twice)
    writers = tuple(
        WriterSpec(
            w.name,
            ComponentSpec(w.type, _options(w, CHAIN_KEYS | {"type"})),
            Branch(w.name, _steps(w)),
            w.errors_tolerance,
            WriteRetry(**w.retry.model_dump()) if w.retry is not None else None,
        )
        for w in model.writers
    )
    return PipelineDefinition(
        name=model.name,
        reader=ComponentSpec(model.reader.type, _options(model.reader, frozenset({"type"}))),
        writers=writers,
        batch_size=model.batch_size,
        batch_wait_s=float(model.batch_wait_s),
        flush_interval_s=None if model.flush_interval_s is None else float(model.flush_interval_s),
        shutdown_timeout_s=float(model.shutdown_timeout_s),
        restart_after_s=float(model.restart_after_s),
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
