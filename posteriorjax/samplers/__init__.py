"""Posterior samplers behind one interface, selected by name.

`get(name, task, **config) -> AbstractSampler`; `names()` lists them. A builder is registered
beside its definition with `register(name, build, networks={option: kind})` (`base.REGISTRY`,
a `posteriorjax.registry.Registry`); `networks` names the network kind each option that takes a
trained network expects. The per-task tuned values the builders read are one table, `tuned`.
"""

from __future__ import annotations

import importlib
import pkgutil

from posteriorjax.samplers.base import REGISTRY, AbstractSampler, register
from posteriorjax.tasks.base import Task as _Task


def unregister(name: str) -> None:
    """Remove the sampler registered under `name` (a plugin unloaded; no-op if absent)."""
    REGISTRY.unregister(name)


def names() -> list[str]:
    """The registered sampler names, sorted."""
    return sorted(REGISTRY.names())


def options(name: str) -> list[str]:
    """The structural options of sampler `name` (its builder's keywords after the task)."""
    return REGISTRY.get(name).options


def networks(name: str) -> dict[str, str]:
    """{builder option: network kind} of the trained networks sampler `name` takes."""
    return dict(REGISTRY.get(name).networks)


def get(name: str, task, **config) -> AbstractSampler:
    """Build sampler `name` for `task` with its structural `config`."""
    entry = REGISTRY.get(name)
    if not isinstance(task, _Task):
        raise TypeError(
            f"task: expected a Task (e.g. tasks.get('poisson_fixed')), got {type(task).__name__} {task!r:.80}"
        )
    unknown = sorted(set(config) - set(entry.options))
    if unknown:
        raise ValueError(f"config: sampler {name!r} has no option(s) {unknown}; options: {entry.options}")
    return entry.build(task, **config)


# Every module of this package is imported here, so a built-in sampler module registers itself
# (its `register` call beside its `build`) without a line in this file.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "AbstractSampler", "get", "names", "networks", "options", "register", "unregister"]
