"""Task registry: `get(name, **overrides) -> Task`, `names() -> list[str]`.

A builder is any callable taking keyword options (e.g. `resolution=32`) and
returning a `Task`; `register(name, builder)` adds it (use `functools.partial`
to register variants of one builder).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from posteriorjax.tasks.base import AbstractPhysics, Cases, Channel, Task

_BUILDERS: dict[str, Callable[..., Task]] = {}


def register(name: str, builder: Callable[..., Task]) -> None:
    """Register `builder` under `name`."""
    if name in _BUILDERS:
        raise ValueError(f"name: task {name!r} is already registered")
    _BUILDERS[name] = builder


def unregister(name: str) -> None:
    """Remove the task registered under `name` (a plugin unloaded; no-op if absent)."""
    _BUILDERS.pop(name, None)


def names() -> list[str]:
    """The registered task names, sorted."""
    return sorted(_BUILDERS)


def get(name: str, **overrides) -> Task:
    """Build the task `name` with keyword `overrides` of its builder's defaults."""
    if name not in _BUILDERS:
        raise ValueError(f"name: unknown task {name!r}; registered tasks: {names()}")
    builder = _BUILDERS[name]
    allowed = list(inspect.signature(builder).parameters)
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ValueError(f"overrides: task {name!r} has no option(s) {unknown}; options: {allowed}")
    return builder(**overrides)


from posteriorjax.tasks import ccs, darcy, fields, interface, ltmi, poisson  # noqa: E402,F401  (registration)

__all__ = ["AbstractPhysics", "Cases", "Channel", "Task", "get", "names", "register", "unregister"]
