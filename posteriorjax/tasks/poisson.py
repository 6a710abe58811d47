"""The Poisson source-recovery tasks.

Sign convention: -lap(phi) = f on the unit square, phi = 0 on the boundary (Eq. 7
of the posterior-matching paper). The DiffusionPDE/FunDPS data generators solve
lap(phi) = f instead, so their phi is the negative of ours for the same f.

Unknown: the source f (1, n, n), a zero-mean cosine GRF. ``poisson``: per-sample
hyperparameters alpha ~ U[1.5, 3], tau ~ U[2, 4] (hierarchical, the published
prior). ``poisson_fixed``: alpha = 2, tau = 3 fixed, so prior, physics and
observation are linear-Gaussian and the posterior is exact
(`reference.exact`). Physics: 5-point finite differences on interior nodes,
solved exactly by the type-I sine transform (`physics.poisson`). Observation:
phi at 128 random point sensors (or pooled to 16 x 16 in the ``*_lowres``
variants), Gaussian noise std 1e-4.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax

from posteriorjax import checks, random_fields
from posteriorjax.grids import Grid
from posteriorjax.observations import GaussianNoise
from posteriorjax.physics import poisson
from posteriorjax.tasks import register
from posteriorjax.tasks.base import AbstractPhysics, Channel, Task, check_options, sensors_or_pooled


class PoissonPhysics(AbstractPhysics):
    """`f (1, n, n) -> phi (1, n, n)` solving -lap(phi) = f, phi = 0 on the boundary (linear)."""

    grid: Grid = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        return poisson.solve(x[0], self.grid)[None]

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        return poisson.residual(x[0], u[0], self.grid)[None]


def _range(name: str, value) -> tuple[float, float]:
    """`(lo, hi)` of positive hyperparameters, lo <= hi (equal ends: a fixed value)."""
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a pair (lo, hi), got {value!r}") from None
    lo, hi = checks.positive(name, lo), checks.positive(name, hi)
    if lo > hi:
        raise ValueError(f"{name}: expected lo <= hi, got {value!r}")
    return lo, hi


def build(
    name: str = "poisson",
    *,
    resolution: int = 128,
    num_sensors: int = 128,
    sensor_seed: int = 0,
    noise_std: float = 1e-4,
    observation: str = "sensors",
    alpha_range: tuple[float, float] = (1.5, 3.0),
    tau_range: tuple[float, float] = (2.0, 4.0),
) -> Task:
    """Poisson task; `alpha_range`/`tau_range` with equal ends give a fixed-hyperparameter GRF."""
    check_options(resolution=resolution, noise_std=noise_std, num_sensors=num_sensors)
    alpha_range, tau_range = _range("alpha_range", alpha_range), _range("tau_range", tau_range)
    grid = Grid(resolution, 1.0, "dirichlet")
    if alpha_range[0] == alpha_range[1] and tau_range[0] == tau_range[1]:
        prior = random_fields.GaussianRandomField(resolution, alpha_range[0], tau_range[0], "cosine")
    else:
        prior = random_fields.HierarchicalGRF(resolution, alpha_range, tau_range, "cosine")
    config = dict(
        resolution=resolution,
        num_sensors=num_sensors,
        sensor_seed=sensor_seed,
        noise_std=noise_std,
        observation=observation,
        alpha_range=alpha_range,
        tau_range=tau_range,
    )
    return Task(
        name=name,
        grid=grid,
        prior=prior,
        physics=PoissonPhysics(grid),
        observation=sensors_or_pooled(grid, observation, num_sensors=num_sensors, sensor_seed=sensor_seed),
        noise=GaussianNoise(noise_std),
        field_stats=(0.0, math.sqrt(prior.pointwise_variance())),
        config=tuple(sorted(config.items())),
        channels=(Channel("source f", "-"),),
    )


def build_fixed(
    name: str = "poisson_fixed",
    *,
    resolution: int = 128,
    num_sensors: int = 128,
    sensor_seed: int = 0,
    noise_std: float = 1e-4,
    observation: str = "sensors",
    alpha: float = 2.0,
    tau: float = 3.0,
) -> Task:
    """Poisson task with a fixed-hyperparameter GRF source: linear-Gaussian, exact posterior."""
    checks.positive("alpha", alpha)
    checks.positive("tau", tau)
    return build(
        name,
        resolution=resolution,
        num_sensors=num_sensors,
        sensor_seed=sensor_seed,
        noise_std=noise_std,
        observation=observation,
        alpha_range=(alpha, alpha),
        tau_range=(tau, tau),
    )


register("poisson", functools.partial(build, "poisson"))
register("poisson_lowres", functools.partial(build, "poisson_lowres", observation="pooled"))
register("poisson_fixed", functools.partial(build_fixed, "poisson_fixed"))
register("poisson_fixed_lowres", functools.partial(build_fixed, "poisson_fixed_lowres", observation="pooled"))
