"""Posterior samplers behind one interface, selected by name.

`get(name, task, **config) -> AbstractSampler`; `names()` lists them. A builder
is registered with `register(name, builder)`, `builder(task, **config)`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.tasks.base import Task

_BUILDERS: dict[str, Callable[..., AbstractSampler]] = {}


def register(name: str, builder: Callable[..., AbstractSampler]) -> None:
    """Register `builder(task, **config)` under `name`."""
    if name in _BUILDERS:
        raise ValueError(f"name: sampler {name!r} is already registered")
    _BUILDERS[name] = builder


def unregister(name: str) -> None:
    """Remove the sampler registered under `name` (a plugin unloaded; no-op if absent)."""
    _BUILDERS.pop(name, None)


def names() -> list[str]:
    """The registered sampler names, sorted."""
    return sorted(_BUILDERS)


def options(name: str) -> list[str]:
    """The structural options of sampler `name` (its builder's keywords after the task)."""
    if name not in _BUILDERS:
        raise ValueError(f"name: unknown sampler {name!r}; registered samplers: {names()}")
    return list(inspect.signature(_BUILDERS[name]).parameters)[1:]


def get(name: str, task, **config) -> AbstractSampler:
    """Build sampler `name` for `task` with its structural `config`."""
    allowed = options(name)
    if not isinstance(task, Task):
        raise TypeError(
            f"task: expected a Task (e.g. tasks.get('poisson_fixed')), got {type(task).__name__} {task!r:.80}"
        )
    builder = _BUILDERS[name]
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise ValueError(f"config: sampler {name!r} has no option(s) {unknown}; options: {allowed}")
    return builder(task, **config)


def _register_builtin() -> None:
    from posteriorjax.samplers import (
        ddis,
        diffusionpde,
        dps,
        eci,
        esmda,
        exact,
        flow_fno,
        funddps,
        fundiff,
        fundps,
        mc_dropout,
        pcn,
        prior,
    )

    register("prior", prior.build)
    register("exact", exact.build)
    register("pcn", pcn.build)
    register("esmda", esmda.build)
    register("dps", dps.build)
    register("fundps", fundps.build)
    register("funddps", funddps.build)
    register("flow_fno", flow_fno.build)
    register("fundiff", fundiff.build)
    register("ddis", ddis.build)
    register("diffusionpde", diffusionpde.build)
    register("eci", eci.build)
    register("mc_dropout", mc_dropout.build)


_register_builtin()

__all__ = ["AbstractSampler", "get", "names", "register", "unregister"]
