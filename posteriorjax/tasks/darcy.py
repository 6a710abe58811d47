"""The Darcy-flow inversion task of the posterior-matching benchmark.

Unknown: a binary permeability a (1, n, n) in {3, 12} (a cosine GRF with alpha = 2,
tau = 3 thresholded at 0). Physics: -div(a grad u) = f (f = 1) on the unit square,
u = 0 on the boundary, finite volumes with harmonic face averages on the interior
nodes (`physics.darcy`). Observation: u at 128 random point sensors (or u average-
pooled to 16 x 16 in the ``darcy_lowres`` variant), Gaussian noise std 1e-4.
Metrics score fields projected back onto {3, 12} at 7.5.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax import checks, random_fields
from posteriorjax.grids import Grid
from posteriorjax.observations import GaussianNoise
from posteriorjax.physics import darcy
from posteriorjax.tasks import register
from posteriorjax.tasks.base import AbstractPhysics, Channel, Task, check_options, sensors_or_pooled


class DarcyPhysics(AbstractPhysics):
    """`a (1, n, n) -> u (1, n, n)` solving -div(a grad u) = f, u = 0 on the boundary."""

    grid: Grid = eqx.field(static=True)
    source: float = eqx.field(static=True, default=1.0)

    def __call__(self, x: jax.Array) -> jax.Array:
        return darcy.solve(x[0], self.grid, self.source)[None]

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        return darcy.residual(x[0], u[0], self.grid, self.source)[None]

    def valid(self, x: jax.Array) -> jax.Array:
        """The solver's domain: every permeability value positive and finite (boolean scalar)."""
        return jnp.all(jnp.isfinite(x) & (x > 0))


def build(
    name: str = "darcy",
    *,
    resolution: int = 128,
    num_sensors: int = 128,
    sensor_seed: int = 0,
    noise_std: float = 1e-4,
    observation: str = "sensors",
    alpha: float = 2.0,
    tau: float = 3.0,
    high: float = 12.0,
    low: float = 3.0,
    source: float = 1.0,
) -> Task:
    check_options(resolution=resolution, noise_std=noise_std, num_sensors=num_sensors, alpha=alpha, tau=tau)
    # the evaluation transform projects onto {low, high} at their midpoint: swapped values would invert it
    low, high = checks.ordered("low, high", low, high, positive_values=True)
    checks.positive("source", source)
    grid = Grid(resolution, 1.0, "dirichlet")
    prior = random_fields.ThresholdedGRF(random_fields.GaussianRandomField(resolution, alpha, tau), high, low)
    mean, std = 0.5 * (high + low), 0.5 * abs(high - low)  # the latent GRF is symmetric: P(high) = 1/2
    config = dict(
        resolution=resolution,
        num_sensors=num_sensors,
        sensor_seed=sensor_seed,
        noise_std=noise_std,
        observation=observation,
        alpha=alpha,
        tau=tau,
        high=high,
        low=low,
        source=source,
    )
    return Task(
        name=name,
        grid=grid,
        prior=prior,
        physics=DarcyPhysics(grid, float(source)),
        observation=sensors_or_pooled(grid, observation, num_sensors=num_sensors, sensor_seed=sensor_seed),
        noise=GaussianNoise(noise_std),
        field_stats=(mean, std),
        binary_values=(low, high),
        config=tuple(sorted(config.items())),
        channels=(Channel("permeability a", "-"),),
    )


register("darcy", functools.partial(build, "darcy"))
register("darcy_lowres", functools.partial(build, "darcy_lowres", observation="pooled"))
