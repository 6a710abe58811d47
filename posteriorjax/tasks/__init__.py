"""Task registry: `get(name, **overrides) -> Task`, `names() -> list[str]`.

A builder is any callable taking keyword options (e.g. `resolution=32`) and returning a `Task`;
`register(name, builder)` adds it beside its definition (`REGISTRY`, a
`posteriorjax.registry.Registry`; use `functools.partial` to register variants of one builder).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from posteriorjax.registry import Registry
from posteriorjax.tasks.base import AbstractPhysics, Cases, Channel, Task

REGISTRY: Registry[Callable[..., Task]] = Registry("task", callable)


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


from posteriorjax.tasks import ccs, darcy, fields, interface, ltmi, poisson  # noqa: E402,F401  (registration)

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
