"""`Task` = prior + physics + observation + noise, and the benchmark cases it draws.

A task's unknown is a field `x (C, H, W)`; `physics(x)` returns the full state
`u (C_u, H, W)`; the observation maps the state to `y (M,)`; the noise is
Gaussian. Tasks are Equinox modules: array data (sensor indices) are leaves,
everything else is static, so a task passes through `jit`/`vmap` as an argument.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks, files, observations
from posteriorjax.grids import Grid
from posteriorjax.observations import AbstractObservation, GaussianNoise


class Cases(NamedTuple):
    """Fixed benchmark cases: `x_true (num, C, H, W)`, `u_true (num, C_u, H, W)`, `y_obs (num, M)`."""

    x_true: jax.Array
    u_true: jax.Array
    y_obs: jax.Array


class Channel(NamedTuple):
    """Name and unit of one channel of a task's unknown, as figures and tables label it.

    `unit` is ``"-"`` for a dimensionless quantity (the unit-square tasks are nondimensional).
    """

    name: str
    unit: str

    @property
    def label(self) -> str:
        """``"name [unit]"``, e.g. ``"permeability [mD]"``."""
        return f"{self.name} [{self.unit}]"


class AbstractPhysics(eqx.Module):
    """Forward model of a task: `__call__(x (C, H, W)) -> u (C_u, H, W)` and its PDE residual."""

    @abc.abstractmethod
    def __call__(self, x: jax.Array) -> jax.Array:
        """The state `u (C_u, H, W)` of the unknown `x (C, H, W)`."""

    @abc.abstractmethod
    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """Discrete PDE residual of the pair (x, u), `(C_u, H, W)`."""

    def valid(self, x: jax.Array) -> jax.Array:
        """Whether the model is defined at `x (C, H, W)`: a boolean scalar (traceable).

        Default: every value finite. Models with a restricted domain (positive
        coefficients, fractions in (0, 1]) override it; `__call__` may raise (or
        `eqx.error_if` under jit) outside it.
        """
        return jnp.all(jnp.isfinite(x))


OBSERVATION_KINDS = ("sensors", "pooled")


def check_options(*, resolution=None, noise_std=None, num_sensors=None, **positives) -> None:
    """The checks every builder shares, raised under the option's own name.

    `resolution`: an integer >= 2 (points per axis); `noise_std`: a finite number > 0;
    `num_sensors`: a positive integer; every other keyword: a finite number > 0 (a
    physical magnitude such as a length scale or a rate). None skips a check.
    """
    if resolution is not None:
        checks.integer_at_least("resolution", resolution, 2)
    if noise_std is not None:
        checks.positive("noise_std", noise_std)
    if num_sensors is not None:
        checks.positive_int("num_sensors", num_sensors)
    for name, value in positives.items():
        checks.positive(name, value)


def sensors_or_pooled(grid: Grid, kind: str, *, num_sensors: int, sensor_seed: int, pooled_size: int = 16):
    """The observation of the posterior-matching tasks.

    ``"sensors"``: `num_sensors` distinct random point sensors drawn from `sensor_seed`;
    ``"pooled"``: average pooling of the state to `pooled_size x pooled_size`
    (no pooling on grids of at most `pooled_size` points per axis).
    """
    if kind == "sensors":
        return observations.point_sensors(grid, num_sensors, seed=sensor_seed)
    if kind == "pooled":
        size = min(pooled_size, grid.n)
        if grid.n % size:
            raise ValueError(f"resolution: {grid.n} is not a multiple of the pooled size {size}")
        return observations.AveragePool(grid.shape, grid.n // size)
    raise ValueError(f"observation: expected one of {OBSERVATION_KINDS}, got {kind!r}")


def binary_projection(x: jax.Array, values: tuple[float, float]) -> jax.Array:
    """`x` (any shape) projected onto `values` = (low, high): high where x > (low + high) / 2, low
    elsewhere (a NaN included). PosteriorBench's binary post-processing
    (`ModelNormalizer.apply_postprocess`, the evaluation profiles' `postprocess.discrete_values`)."""
    low, high = values
    return jnp.where(x > 0.5 * (low + high), high, low).astype(x.dtype)


class Task(eqx.Module):
    """An inverse problem: recover `x` from noisy observations `y = observation(physics(x)) + noise`.

    Attributes:
      name: registry name.
      grid: the physics grid (static, hashable, with `.shape`; a `grids.Grid` for
        the square-domain tasks, `physics.co2.RadialGrid` for CO2 storage).
      prior: prior over the unknown with `sample(key) -> (C, H, W)`, `latent`, `transform`.
      physics: `AbstractPhysics`.
      observation: `AbstractObservation` of the state.
      noise: `GaussianNoise` of the observations.
      field_stats: `(mean, std)` of the evaluated field under the prior (the scalar
        z-score of the sliced Wasserstein distance and per-channel normalization).
      binary_values: `(low, high)` when the prior is binary; `evaluation_field`
        then projects fields onto these two values at their midpoint.
      config: the builder's arguments, `((key, value), ...)`, for hashing and provenance.
      channels: one `Channel` (name, unit) per channel of the unknown; every registered
        task sets them (empty only for tasks built by hand, e.g. in tests).
    """

    name: str = eqx.field(static=True)
    grid: Any = eqx.field(static=True)
    prior: Any
    physics: AbstractPhysics
    observation: AbstractObservation
    noise: GaussianNoise
    field_stats: tuple[float, float] = eqx.field(static=True)
    binary_values: tuple[float, float] | None = eqx.field(static=True, default=None)
    config: tuple = eqx.field(static=True, default=())
    channels: tuple[Channel, ...] = eqx.field(static=True, default=())

    def __check_init__(self):
        if self.channels and len(self.channels) != self.unknown_shape[0]:
            raise ValueError(
                f"channels: expected one Channel per channel of the unknown {self.unknown_shape}, "
                f"got {len(self.channels)}"
            )
        for c in self.channels:
            if not (isinstance(c, Channel) and c.name and c.unit):
                raise ValueError(f"channels: expected Channel(name, unit) with both non-empty, got {c!r}")

    # -- shapes -------------------------------------------------------------
    @property
    def unknown_shape(self) -> tuple[int, int, int]:
        return tuple(self.prior.shape)

    @property
    def state_shape(self) -> tuple[int, ...]:
        return tuple(
            jax.eval_shape(self.physics, jax.ShapeDtypeStruct(self.unknown_shape, jnp.float32)).shape
        )

    @property
    def num_observations(self) -> int:
        state = jax.ShapeDtypeStruct(self.state_shape, jnp.float32)
        return int(jax.eval_shape(self.observation, state).shape[0])

    @property
    def noise_std(self) -> jax.Array:
        return self.noise.std

    def _check_unknown(self, x, name: str = "x") -> None:
        if tuple(jnp.shape(x)) != self.unknown_shape:
            raise ValueError(
                f"{name}: expected shape {self.unknown_shape} for task {self.name!r}, got {jnp.shape(x)}"
            )

    def check_observation(self, y_obs, name: str = "y_obs") -> None:
        """Raise unless `y_obs` is one observation vector `(num_observations,)` of finite values.

        The shape is always checked. The values are checked when `y_obs` is concrete
        (every eager entry point: `sample`, `suite.evaluate`, `reference.exact`, an
        eager `log_likelihood`); inside jit/vmap they are data and cannot raise, so
        a NaN observation there propagates to NaN results (`checks.finite`).
        """
        expected = (self.num_observations,)
        if tuple(jnp.shape(y_obs)) != expected:
            raise ValueError(
                f"{name}: expected shape {expected} for task {self.name!r}, got {jnp.shape(y_obs)}"
            )
        checks.finite(y_obs, name)

    # -- the model ------------------------------------------------------------
    def solve(self, x: jax.Array) -> jax.Array:
        """Full physical state `u (C_u, H, W)` of the unknown `x (C, H, W)`."""
        self._check_unknown(x)
        return self.physics(x)

    def forward(self, x: jax.Array) -> jax.Array:
        """Noise-free observations `(M,)` of the unknown `x (C, H, W)`."""
        checks.finite(x, "x")  # eager only: under jit `valid` / the solver's own checks apply
        return self.observation(self.solve(x))

    def valid(self, x: jax.Array) -> jax.Array:
        """Whether the physics is defined at `x (C, H, W)` (boolean scalar, jit/vmap-able).

        `physics.valid`: every value finite by default; e.g. Darcy also needs a
        positive permeability. `forward`, `simulate`, `log_likelihood` and
        `misfit` are only defined where it holds (outside it they raise, under
        jit through `eqx.error_if`), so code scoring arbitrary sampler output
        evaluates them on valid members only.
        """
        self._check_unknown(x)
        return self.physics.valid(x)

    def simulate(self, key, x: jax.Array) -> jax.Array:
        """Noisy observations `(M,)`."""
        y = self.forward(x)
        return y + self.noise.sample(key, y.shape)

    def log_likelihood(self, x: jax.Array, y_obs: jax.Array) -> jax.Array:
        """Gaussian log-likelihood log p(y_obs | x), normalized."""
        self.check_observation(y_obs)
        return self.noise.log_likelihood(y_obs - self.forward(x))

    def misfit(self, x: jax.Array, y_obs: jax.Array) -> jax.Array:
        """Whitened mean squared misfit ||(forward(x) - y_obs) / std||^2 / M (about 1 at the truth)."""
        self.check_observation(y_obs)
        r = self.noise.whiten(self.forward(x) - y_obs)
        return jnp.mean(r**2)

    def cases(self, seed: int, num: int, start: int = 0) -> Cases:
        """`num` fixed cases; case i uses `fold_in(key(seed), start + i)`, so cases never depend on
        `num`, and case index ranges that do not overlap draw from distinct keys (the sweep's test
        cases start at 0, its calibration's validation cases at `sweep.calibrate.VALIDATION_START`)."""
        num = checks.positive_int("num", num)
        start = checks.integer_at_least("start", start, 0)
        return _draw_cases(self, jr.key(seed), num, jnp.asarray(start, jnp.uint32))

    # -- evaluation ----------------------------------------------------------
    def evaluation_field(self, x: jax.Array) -> jax.Array:
        """The field the posterior metrics score, `(C', H, W)`.

        Identity, except for binary priors: `binary_projection` onto `binary_values`.
        """
        if self.binary_values is None:
            return x
        return binary_projection(x, self.binary_values)

    @property
    def evaluation_name(self) -> str:
        """How `evaluation_field` transforms fields, recorded beside every score."""
        if self.binary_values is None:
            return "identity"
        low, high = self.binary_values
        return f"binarized@{0.5 * (low + high):g}"

    def config_dict(self) -> dict:
        return {"task": self.name, **dict(self.config)}

    def config_hash(self) -> str:
        """SHA-256 (hex, 16 chars) of the task configuration; artifacts record and check it."""
        return files.json_digest(self.config_dict(), 16)


@eqx.filter_jit
def _draw_cases(task: Task, base, num: int, start) -> Cases:
    """One compiled program per (task, num): case i from `fold_in(base, start + i)`."""

    def one(i):
        k_prior, k_noise = jr.split(jr.fold_in(base, i))
        x = task.prior.sample(k_prior)
        u = task.physics(x)
        return x, u, task.observation(u) + task.noise.sample(k_noise, (task.num_observations,))

    return Cases(*jax.vmap(one)(start + jnp.arange(num, dtype=jnp.uint32)))
