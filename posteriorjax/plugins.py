"""Out-of-tree samplers, tasks, metrics, network kinds and reference methods, loaded by module path.

A plugin is an importable module (``my_package.my_sampler`` or ``examples.plugin_sampler``)
that registers its entries when imported, with the same calls the package makes beside its own:
`samplers.register`, `tasks.register`, `metrics.registry.register`, `training.kinds.register`
and `reference.registry.register` (`REGISTRIES` lists the five `posteriorjax.registry.Registry`
objects by what they hold). `load(modules)` imports each one; the experiments take the list as
``--plugins=mod1,mod2``, the sweep records it in ``provenance.json`` (``plugins``) and
`check_workdir` says which plugins a workdir needs when one of its samplers or tasks is
unknown.

Multi-host runs: every process must register the same samplers and tasks before it builds
anything, so every process calls `load` with the same list first thing in `main` (the
experiments do this before `jax.distributed.initialize()` and before reading the config).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from posteriorjax import samplers, tasks, training
from posteriorjax.metrics import registry as metric_registry
from posteriorjax.reference import registry as reference_registry

# every registry a plugin may add to, by what an entry is
REGISTRIES = {
    "sampler": samplers.REGISTRY,
    "task": tasks.REGISTRY,
    "metric": metric_registry.REGISTRY,
    "network kind": training.kinds.REGISTRY,
    "reference method": reference_registry.REGISTRY,
}

_LOADED: dict[str, dict[str, list[str]]] = {}


def _registered() -> dict[str, set[str]]:
    return {what: set(registry.names()) for what, registry in REGISTRIES.items()}


def parse(modules: str | Iterable[str] | None) -> list[str]:
    """A plugin list from ``"a,b"`` or a sequence of module paths (blank entries dropped)."""
    if modules is None:
        return []
    if isinstance(modules, str):
        modules = modules.split(",")
    return [m.strip() for m in modules if m.strip()]


def load(modules: str | Iterable[str] | None) -> dict[str, dict[str, list[str]]]:
    """Import each plugin module; returns ``{module: {what: new names}}`` (`what`: a key of
    `REGISTRIES`, only those the module added to).

    A module must register at least one entry when first imported. Loading an already loaded
    module again is a no-op (its first registrations are returned). Errors name the module: one
    that cannot be imported, or that registers nothing new.
    """
    out = {}
    for module in parse(modules):
        if module in _LOADED:
            out[module] = _LOADED[module]
            continue
        before = _registered()
        try:
            importlib.import_module(module)
        except Exception as e:
            raise ValueError(
                f"plugins: cannot import plugin module {module!r}: {type(e).__name__}: {e}"
            ) from e
        after = _registered()
        new = {what: sorted(after[what] - before[what]) for what in REGISTRIES if after[what] - before[what]}
        if not new:
            raise ValueError(
                f"plugins: module {module!r} registered no new sampler, task, metric, network kind or "
                "reference method (call their `register` at import, e.g. posteriorjax.samplers.register; "
                "a module imported before load() has already registered)"
            )
        _LOADED[module] = out[module] = new
    return out


def unload(module: str) -> None:
    """Remove what `load(module)` registered and forget the module (no-op if not loaded), so a
    notebook can load an edited plugin again and a test leaves the registries as it found them."""
    if module not in _LOADED:
        return
    for what, names in _LOADED.pop(module).items():
        for name in names:
            REGISTRIES[what].unregister(name)
    sys.modules.pop(module, None)


def recorded(workdir) -> list[str]:
    """The plugin list a sweep workdir was run with (``provenance.json``; [] when absent)."""
    path = Path(workdir) / "provenance.json"
    if not path.exists():
        return []
    return list(json.loads(path.read_text()).get("plugins", []))


def required_names(config: dict) -> tuple[list[str], list[str]]:
    """(sampler names, task names) a sweep config (as stored in ``config.json``) builds."""
    sampler_names = {
        (entry or {}).get("sampler") or label for label, entry in (config.get("samplers") or {}).items()
    }
    return sorted(sampler_names), sorted(config.get("tasks") or {})


def check_names(sampler_names: Sequence[str], task_names: Sequence[str], plugins: Sequence[str]) -> None:
    """Raise a `ValueError` naming the unknown samplers/tasks and the plugins to load."""
    known = _registered()
    known_samplers, known_tasks = known["sampler"], known["task"]
    missing_s = sorted(set(sampler_names) - known_samplers)
    missing_t = sorted(set(task_names) - known_tasks)
    if not (missing_s or missing_t):
        return
    what = ", ".join(
        f"{kind} {names}" for kind, names in (("sampler(s)", missing_s), ("task(s)", missing_t)) if names
    )
    loaded = sorted(_LOADED)
    hint = (
        f"it was run with --plugins={','.join(plugins)}; pass the same flag"
        if plugins
        else "no plugin is recorded for it; pass --plugins=<module> registering them"
    )
    raise ValueError(f"plugins: unknown {what} (loaded plugins: {loaded}); {hint}")


def check_workdir(workdir) -> None:
    """Check that every sampler and task of a sweep workdir's ``config.json`` is registered."""
    path = Path(workdir) / "config.json"
    if not path.exists():
        return
    check_names(*required_names(json.loads(path.read_text())), recorded(workdir))
