"""The per-task tuned values of every sampler, in one table keyed by the exact task name.

`TASKS[task name]` (a `Tuned`) says which PosteriorBench dataset the task is (its physics, prior
family and observation operator: the `_fixed` and `_lowres` variants change the prior's
hyperparameters or the resolution only), so that the dataset's published values apply to it,
and gives our profile's values for it, by sampler. No prefix matching: ``darcy_new`` is not
``darcy``.

`PUBLISHED[dataset][sampler]` transcribes PosteriorBench's `configs/evaluations/<sampler>_<
dataset>.yaml` (`tests/test_published_profiles.py` pins every number). A builder reads them with
`published(task, sampler, instead)`: a task without published values is an error naming the
tasks that have them and what to pass instead. `PUBLISHED_DISCRETE_VALUES[dataset]` transcribes
their `postprocess.discrete_values` (every profile of a dataset has the same); a builder reads it
with `profile_discrete_values(task, profile)` or `resolve_discrete_values(task, option)`.

Our profile's values are tuned on Darcy (guidance weights, DDIS's annealing levels) and otherwise
the same on every task. A builder reads them with `ours(task, sampler)`, and the published values
it falls back to without a profile of its own with `published_or_default(task, sampler)`; a task
without an entry gets `DEFAULTS[sampler]` with a logged warning naming the task, the sampler and
the values (once per pair), never silently. Add a task here to give it tuned values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from absl import logging

from posteriorjax import checks

# configs/evaluations/<sampler>_<dataset>.yaml, per PosteriorBench dataset (light_transport: ltmi).
# fundps: field_weights of the observed state and the sigma range (in the published 0.5-scaled
# units); funddps, diffusionpde: field_weights; ddis: annealing levels, Langevin steps, lr, eta,
# field_weights and the observation scale; esmda: ensemble size, inflation factors and the
# observation std scale; eci: n_mix and resample_step; fundiff: sampling.num_steps.
PUBLISHED: dict[str, dict[str, dict[str, Any]]] = {
    "darcy": {
        "fundps": {"guidance": 4000.0, "sigma_min": 0.002, "sigma_max": 80.0},
        "funddps": {"guidance": 1000.0},
        "diffusionpde": {"guidance": 40000.0},
        "ddis": {"num_steps": 200, "langevin_steps": 10, "step_size": 1e-4, "temperature": 0.1,
                 "weight": 10.0, "obs_scale": 1.0},
        "esmda": {"ensemble_size": 128, "alphas": (2.0, 2.0), "obs_std_scale": 10.0},
        "eci": {"mixing": 5, "resample_step": 1},
        "fundiff": {"num_steps": 20},
    },
    "poisson": {
        "fundps": {"guidance": 1600.0, "sigma_min": 0.01, "sigma_max": 10.0},
        "funddps": {"guidance": 100.0},
        "diffusionpde": {"guidance": 20000.0},
        "ddis": {"num_steps": 100, "langevin_steps": 35, "step_size": 7e-5, "temperature": 0.25,
                 "weight": 2.0, "obs_scale": 0.5},
        "esmda": {"ensemble_size": 512, "alphas": (1.0,), "obs_std_scale": 100.0},
        "eci": {"mixing": 1, "resample_step": 1},
        "fundiff": {"num_steps": 20},
    },
    "ccs": {
        "fundps": {"guidance": 300.0, "sigma_min": 0.002, "sigma_max": 80.0},
        "funddps": {"guidance": 17.5},
        "diffusionpde": {"guidance": 1000.0},
        "ddis": {"num_steps": 100, "langevin_steps": 20, "step_size": 1e-4, "temperature": 0.1,
                 "weight": 0.4, "obs_scale": 1.0},
        "esmda": {"ensemble_size": 256, "alphas": (4.0, 4.0, 4.0, 4.0), "obs_std_scale": 2.0},
        "eci": {"mixing": 1, "resample_step": 5},
        "fundiff": {"num_steps": 100},
    },
    "ltmi": {
        "fundps": {"guidance": 3000.0, "sigma_min": 0.002, "sigma_max": 80.0},
        "funddps": {"guidance": 400.0},
        "diffusionpde": {"guidance": 400.0},
        "ddis": {"num_steps": 100, "langevin_steps": 20, "step_size": 1e-4, "temperature": 0.1,
                 "weight": 3.0, "obs_scale": 1.0},
        "esmda": {"ensemble_size": 1024, "alphas": (1.0,), "obs_std_scale": 1.0},
        "eci": {"mixing": 1, "resample_step": 5},
        "fundiff": {"num_steps": 20},
    },
}  # fmt: skip

# `postprocess.discrete_values` of every evaluation profile of the dataset (the same in each
# method's YAML): the published output is projected onto the two values at their midpoint
# (`tasks.base.binary_projection`). Only Darcy's binary permeability has one.
PUBLISHED_DISCRETE_VALUES: dict[str, tuple[float, float]] = {"darcy": (3.0, 12.0)}

# Our profile's values for a task without tuned ones (logged when used), and the published values
# a sampler falls back to on a task without a PosteriorBench dataset: ES-MDA one assimilation,
# ECI's published profile fresh noise every mix, FunDiff 20 steps.
DEFAULTS: dict[str, dict[str, Any]] = {
    "dps": {"guidance": 1600.0},
    "fundps": {"guidance": 1600.0},
    "funddps": {"guidance": 100.0},
    "diffusionpde": {"guidance": 20000.0},
    "ddis": {"num_steps": 100},
    "esmda": {"alphas": (1.0,)},
    "eci": {"resample_step": 1},
    "fundiff": {"num_steps": 20},
}

# Our profile on Darcy (both resolutions): the guidance weights and DDIS's 200 annealing levels
# tuned there; every other value is `DEFAULTS`'. FunDPS's best weight depends on the noise and the
# sensors (the oracle sweep on poisson_fixed 16^2 picks another weight: the table in
# docs/samplers.md, "Guided diffusion").
_OURS_DARCY = {
    "dps": {"guidance": 4000.0},
    "fundps": {"guidance": 4000.0},
    "funddps": {"guidance": 1000.0},
    "diffusionpde": {"guidance": 40000.0},
    "ddis": {"num_steps": 200},
}
_OURS = {k: DEFAULTS[k] for k in ("dps", "fundps", "funddps", "diffusionpde", "ddis")}


@dataclasses.dataclass(frozen=True)
class Tuned:
    """The tuned values of one task: `dataset`, the PosteriorBench dataset it is (a key of
    `PUBLISHED`), and `ours`, our values by sampler {sampler: {name: value}}."""

    dataset: str
    ours: Mapping[str, Mapping[str, Any]]

    def __post_init__(self):
        if self.dataset not in PUBLISHED:
            raise ValueError(f"dataset: expected one of {sorted(PUBLISHED)}, got {self.dataset!r}")


TASKS: dict[str, Tuned] = {
    "darcy": Tuned("darcy", _OURS_DARCY),
    "darcy_lowres": Tuned("darcy", _OURS_DARCY),
    "poisson": Tuned("poisson", _OURS),
    "poisson_fixed": Tuned("poisson", _OURS),
    "poisson_lowres": Tuned("poisson", _OURS),
    "poisson_fixed_lowres": Tuned("poisson", _OURS),
    "ccs": Tuned("ccs", _OURS),
    "ltmi": Tuned("ltmi", _OURS),
    "ltmi_full": Tuned("ltmi", _OURS),
}

_WARNED: set[tuple[str, str]] = set()


def dataset(task) -> str | None:
    """The PosteriorBench dataset of `task` (by exact name), or None."""
    entry = TASKS.get(task.name)
    return None if entry is None else entry.dataset


def published(task, sampler: str, instead: str) -> dict[str, Any]:
    """The published values of `sampler` on `task`'s dataset; a `ValueError` for a task without them
    (naming the tasks that have them and `instead`, what to pass)."""
    name = dataset(task)
    if name is None or sampler not in PUBLISHED[name]:
        known = sorted(t for t, entry in TASKS.items() if sampler in PUBLISHED[entry.dataset])
        raise ValueError(
            f"task: {sampler} has no published values for task {task.name!r} (published for {known}); "
            f"pass {instead}"
        )
    return dict(PUBLISHED[name][sampler])


def _default(task, sampler: str, what: str) -> dict[str, Any]:
    values = dict(DEFAULTS[sampler])
    if (task.name, sampler) not in _WARNED:
        _WARNED.add((task.name, sampler))
        logging.warning(
            "[tuned] task %r has no %s values for sampler %r; using the defaults %s "
            "(add the task to posteriorjax/samplers/tuned.py, or pass the options)",
            task.name,
            what,
            sampler,
            values,
        )
    return values


def ours(task, sampler: str) -> dict[str, Any]:
    """Our profile's values of `sampler` on `task` (by exact name); `DEFAULTS[sampler]`, logged, for
    a task without them."""
    entry = TASKS.get(task.name)
    if entry is not None and sampler in entry.ours:
        return dict(entry.ours[sampler])
    return _default(task, sampler, "tuned")


def published_or_default(task, sampler: str) -> dict[str, Any]:
    """The published values of `sampler` on `task`'s dataset; `DEFAULTS[sampler]`, logged, for a task
    without them (the samplers whose published values double as their defaults)."""
    name = dataset(task)
    if name is not None and sampler in PUBLISHED[name]:
        return dict(PUBLISHED[name][sampler])
    return _default(task, sampler, "published")


def published_discrete_values(task) -> tuple[float, float] | None:
    """The binary projection of every published profile on `task`'s dataset
    (`PUBLISHED_DISCRETE_VALUES`), taken as the task's own `binary_values` (on the default Darcy task
    the published {3, 12}); None on a dataset without one or a task without a PosteriorBench dataset."""
    if dataset(task) not in PUBLISHED_DISCRETE_VALUES:
        return None
    return getattr(task, "binary_values", None)


def resolve_discrete_values(task, given) -> tuple[float, float] | None:
    """A builder's `discrete_values` option: ``"published"`` (`published_discrete_values`), None (no
    projection) or a `(low, high)` pair, validated (ValueError naming the option)."""
    if isinstance(given, str) and given == "published":
        return published_discrete_values(task)
    if given is None:
        return None
    if isinstance(given, str) or not hasattr(given, "__len__") or len(given) != 2:
        raise ValueError(f"discrete_values: expected 'published', None or (low, high), got {given!r}")
    return checks.ordered("discrete_values", *given)


def profile_discrete_values(task, profile: str) -> tuple[float, float] | None:
    """The output projection of a sampler built with `profile`: the published one
    (`published_discrete_values`) for ``"published"``, none for our profile."""
    return published_discrete_values(task) if profile == "published" else None
