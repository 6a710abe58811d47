"""Task registry: `get(name, **overrides) -> Task`, `names() -> list[str]`.

A builder is any callable taking keyword options (e.g. `resolution=32`) and returning a `Task`;
`register(name, builder)` adds it beside its definition (`REGISTRY`, a
`posteriorjax.registry.Registry`; use `functools.partial` to register variants of one builder).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable

from posteriorjax import registry as _registry
from posteriorjax.tasks.base import AbstractPhysics, Cases, Channel, Task

REGISTRY: _registry.Registry[Callable[..., Task]] = _registry.Registry("task", callable)
"""The task registry: name -> builder (keyword options -> `Task`)."""


def register(name: str, builder: Callable[..., Task]) -> Callable[..., Task]:
    """Register `builder` under `name`; returns it."""
    return REGISTRY.register(name, builder)


def unregister(name: str) -> None:
    """Remove the task registered under `name` (a plugin unloaded; no-op if absent)."""
    REGISTRY.unregister(name)


def names() -> list[str]:
    """The registered task names, sorted."""
    return sorted(REGISTRY.names())


def get(name: str, **overrides) -> Task:
    """Build the task `name` with keyword `overrides` of its builder's defaults."""
    builder = REGISTRY.get(name)
    allowed = list(inspect.signature(builder).parameters)
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ValueError(f"overrides: task {name!r} has no option(s) {unknown}; options: {allowed}")
    return builder(**overrides)


# Every module of this package is imported here, so a built-in task module registers itself (its
# `register` call beside its builder) without a line in this file.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "REGISTRY",
    "AbstractPhysics",
    "Cases",
    "Channel",
    "Task",
    "get",
    "names",
    "register",
    "unregister",
]
