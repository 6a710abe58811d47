"""The light-transport material inference (LTMI) task of the posterior-matching benchmark.

Unknown: the extinction fields of two stacked layers, x (2, n, n) in [0.01, 5].
Prior (`LayeredMorphology`): per layer and per sample, with probability `cloud_prob`
a cloud-like field (a smooth GRF g, `random_fields.SmoothGRF`, exponentiated and
thresholded: v = max(exp g - exp c, 0) / max(...)), otherwise a cellular one
(Worley: v = 1 - F1 / max F1, F1 the periodic distance to the nearest of `num_cells`
uniform points), scaled to sigma = lo + (hi - lo) v.
Physics: two-stream columns with adding and lateral spread (`physics.radiative`);
the state is reflectance and/or transmittance (C_u, n, n).
Observation: the state average-pooled to 16 x 16 (``pooled``, the published one),
every pixel (``full``) or random point sensors (``sensors``); Gaussian noise.
Metrics score the mean of the two layers (``evaluation="mean"``, as published) or
the layers themselves (``evaluation="layers"``).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.scipy.special import ndtr

from posteriorjax import checks, observations, random_fields
from posteriorjax.grids import Grid
from posteriorjax.observations import GaussianNoise
from posteriorjax.physics import radiative
from posteriorjax.tasks import register
from posteriorjax.tasks.base import AbstractPhysics, Channel, Task, check_options

CHANNELS = {"reflectance": (0,), "transmittance": (1,), "both": (0, 1)}
EVALUATIONS = ("mean", "layers")


class LayeredMorphology(eqx.Module):
    """Two-layer extinction prior, `(2, n, n)`; latent all standard normal.

    Latent: ``{"xi": (2, n, n), "points": (2, num_cells, 2), "choice": (2,)}``.
    """

    n: int = eqx.field(static=True)
    low: float = eqx.field(static=True, default=0.01)
    high: float = eqx.field(static=True, default=5.0)
    length_scale: float = eqx.field(static=True, default=0.05)
    threshold: float = eqx.field(static=True, default=0.0)
    num_cells: int = eqx.field(static=True, default=12)
    cloud_prob: float = eqx.field(static=True, default=0.5)

    def __check_init__(self):
        if not (0 <= self.low < self.high):
            raise ValueError(f"low, high: expected 0 <= low < high, got {self.low}, {self.high}")
        if not (0 <= self.cloud_prob <= 1):
            raise ValueError(f"cloud_prob: expected a probability, got {self.cloud_prob}")
        checks.positive_int("num_cells", self.num_cells)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (2, self.n, self.n)

    def latent(self, key) -> dict:
        k1, k2, k3 = jr.split(key, 3)
        return {
            "xi": jr.normal(k1, self.shape),
            "points": jr.normal(k2, (2, self.num_cells, 2)),
            "choice": jr.normal(k3, (2,)),
        }

    def cloud(self, xi: jax.Array) -> jax.Array:
        """Cloud-like morphology in [0, 1] from white noise `(n, n)`."""
        g = random_fields.SmoothGRF(self.n, self.length_scale).transform(xi[None])[0]
        v = jnp.maximum(jnp.exp(g) - jnp.exp(self.threshold), 0.0)
        return v / (jnp.max(v) + 1e-12)

    def cellular(self, points: jax.Array) -> jax.Array:
        """Worley (distance to the nearest feature point) morphology in [0, 1]."""
        u = ndtr(points)  # (K, 2) uniform in the unit square
        c = (jnp.arange(self.n, dtype=u.dtype) + 0.5) / self.n
        d = jnp.abs(c[None, :, None] - u[:, None, :])  # (K, n, 2)
        d = jnp.minimum(d, 1 - d)
        dist2 = d[:, :, None, 0] ** 2 + d[:, None, :, 1] ** 2  # (K, n, n)
        f1 = jnp.sqrt(jnp.min(dist2, axis=0))
        return 1 - f1 / jnp.max(f1)

    def transform(self, latent: dict) -> jax.Array:
        clouds = jax.vmap(self.cloud)(latent["xi"])
        cells = jax.vmap(self.cellular)(latent["points"])
        is_cloud = (ndtr(latent["choice"]) < self.cloud_prob)[:, None, None]
        v = jnp.where(is_cloud, clouds, cells)
        return (self.low + (self.high - self.low) * v).astype(latent["xi"].dtype)

    def sample(self, key) -> jax.Array:
        return self.transform(self.latent(key))


class LTMIPhysics(AbstractPhysics):
    """`sigma (2, n, n) -> (R, T)[channels] (C_u, n, n)` (see `physics.radiative`)."""

    channels: tuple[int, ...] = eqx.field(static=True, default=(1,))
    albedo: float = eqx.field(static=True, default=0.9)
    asymmetry: float = eqx.field(static=True, default=0.5)
    mu0: float = eqx.field(static=True, default=1.0)
    thickness: float = eqx.field(static=True, default=1.0)
    spread: float = eqx.field(static=True, default=1.5)

    def options(self) -> dict:
        return dict(
            albedo=self.albedo,
            asymmetry=self.asymmetry,
            mu0=self.mu0,
            thickness=self.thickness,
            spread=self.spread,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return radiative.solve(x, **self.options())[jnp.asarray(self.channels)]

    def valid(self, x: jax.Array) -> jax.Array:
        """The solver's domain: every extinction finite and non-negative (boolean scalar).

        `radiative.transport` raises outside it. Zero is a transparent pixel, and
        finite values far above the prior's `radiative.EXTINCTION_RANGE` are
        solved too (an opaque pixel: the direct beam and the two-stream
        responses saturate), so the prior range is no part of the domain.
        """
        return jnp.all(jnp.isfinite(x) & (x >= 0))

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """Pixelwise energy residual 1 - R - T - absorption `(1, n, n)`, the observed channels from `u`."""
        full = radiative.solve(x, **self.options())
        full = full.at[jnp.asarray(self.channels)].set(u)
        return radiative.residual(x, full, **self.options())


class LayeredTask(Task):
    """`Task` whose metrics score the mean of the two layers (or the layers, `evaluation="layers"`)."""

    evaluation: str = eqx.field(static=True, default="mean")

    @property
    def evaluation_name(self) -> str:
        return "mean of the two layers" if self.evaluation == "mean" else "both layers"

    def evaluation_field(self, x: jax.Array) -> jax.Array:
        """`(1, n, n)` mean of the layers, or `x` itself with ``evaluation="layers"``."""
        if self.evaluation == "layers":
            return x
        return jnp.mean(x, axis=-3, keepdims=True)

    def layer_field(self, x: jax.Array, layer: int) -> jax.Array:
        """One layer `(1, n, n)`, for per-layer metrics."""
        return x[..., layer : layer + 1, :, :]


def _observation(grid: Grid, kind: str, num_sensors: int, sensor_seed: int, pooled_size: int):
    if kind == "pooled":
        if grid.n % pooled_size:
            raise ValueError(f"resolution: {grid.n} is not a multiple of pooled_size {pooled_size}")
        return observations.AveragePool(grid.shape, grid.n // pooled_size)
    if kind == "full":
        return observations.AveragePool(grid.shape, 1)
    if kind == "sensors":
        return observations.point_sensors(grid, num_sensors, seed=sensor_seed)
    raise ValueError(f"observation: expected one of ('pooled', 'full', 'sensors'), got {kind!r}")


def field_statistics(prior: LayeredMorphology, evaluation: str, num: int = 64) -> tuple[float, float]:
    """(mean, std) of the evaluated field under the prior, from `num` samples (fixed key 0)."""
    x = random_fields.sample_batch(prior, jr.key(0), num)
    field = x.mean(axis=1) if evaluation == "mean" else x
    field = np.asarray(field, np.float64)
    return float(field.mean()), float(field.std())


def build(
    name: str = "ltmi",
    *,
    resolution: int = 64,
    observe: str = "transmittance",
    observation: str = "pooled",
    pooled_size: int = 16,
    num_sensors: int = 256,
    sensor_seed: int = 0,
    noise_std: float = 0.01,
    albedo: float = 0.9,
    asymmetry: float = 0.5,
    spread: float = 1.5,
    thickness: float = 1.0,
    evaluation: str = "mean",
    cloud_prob: float = 0.5,
) -> Task:
    checks.in_choices("observe", observe, tuple(CHANNELS))
    checks.in_choices("evaluation", evaluation, EVALUATIONS)
    check_options(
        resolution=resolution,
        noise_std=noise_std,
        num_sensors=num_sensors,
        spread=spread,
        thickness=thickness,
    )
    checks.positive_int("pooled_size", pooled_size)
    if not 0 <= albedo <= 1 or not -1 < asymmetry < 1:
        raise ValueError(
            "albedo, asymmetry: expected albedo in [0, 1] and asymmetry in (-1, 1), "
            f"got {albedo!r}, {asymmetry!r}"
        )
    grid = Grid(resolution, 1.0, "neumann")
    low, high = radiative.EXTINCTION_RANGE
    prior = LayeredMorphology(resolution, low, high, cloud_prob=cloud_prob)
    physics = LTMIPhysics(
        CHANNELS[observe], float(albedo), float(asymmetry), 1.0, float(thickness), float(spread)
    )
    options = dict(
        resolution=resolution,
        observe=observe,
        observation=observation,
        pooled_size=pooled_size,
        num_sensors=num_sensors,
        sensor_seed=sensor_seed,
        noise_std=noise_std,
        albedo=albedo,
        asymmetry=asymmetry,
        spread=spread,
        thickness=thickness,
        evaluation=evaluation,
        cloud_prob=cloud_prob,
    )
    return LayeredTask(
        name=name,
        grid=grid,
        prior=prior,
        physics=physics,
        observation=_observation(grid, observation, num_sensors, sensor_seed, pooled_size),
        noise=GaussianNoise(noise_std),
        field_stats=field_statistics(prior, evaluation),
        config=tuple(sorted(options.items())),
        channels=tuple(Channel(f"extinction, {layer} layer", "1/thickness") for layer in ("top", "bottom")),
        evaluation=evaluation,
    )


register("ltmi", functools.partial(build, "ltmi"))
register("ltmi_full", functools.partial(build, "ltmi_full", observation="full"))
