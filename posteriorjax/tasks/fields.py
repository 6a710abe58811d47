"""The observation-pattern field tasks (PDE-OBS families): recovery and forecasting.

Every task's unknown is the family's condition field b `(1, n, n)`, the PDE-OBS
smooth GRF (`random_fields.SmoothGRF`, l = 0.22, per-sample standardized); the
physics applies the family's regime scaling and solves. The observation is a
PDE-OBS pattern (`observations.pattern`, default the R50 view) with Gaussian
noise; `record` and `pattern_seed` select the realization of the pattern.

Recovery (static, Dirichlet interior nodes, `Grid(n, bc="dirichlet")`):
observe the solution u `(1, n, n)` through the pattern, recover all of it
(the recovered solution is `task.solve(x)` of a posterior sample x).

  * ``darcy_field``: -div(a grad u) = f, a = exp(0.5 ln(contrast) b~), b~ = b
    range-normalized to [-1, 1], f = sin 2 pi x sin 2 pi y
    + 0.2 sin(4 pi x + 0.3) sin 2 pi y minus its mean; contrast 2 / 8 / 32.
  * ``poisson_field``: -lap u = amplitude * b; amplitude 0.5 / 1 / 2.
  * ``helmholtz_field``: -lap u - k^2 u = b, no damping; k 0.5 / 1 / 2.

Forecasting (periodic, `Grid(n, bc="periodic")`, frames t_h = h T / 14):
the state is frames 0..3 `(4, n, n)` of the trajectory from u0 (frame 0 is
u0 itself); the pattern observes frame 0 only; the targets are frames 1-3.

  * ``heat_field``: alpha 0.005 / 0.02 / 0.08, T = 0.25, u0 = b.
  * ``reaction_diffusion_field``: Allen-Cahn, D = 0.008, r 0.5 / 1.5 / 4,
    T = 0.8, u0 = 0.8 b.
  * ``burgers_field``: nu 0.04 / 0.015 / 0.004, T = 0.35, u0 = b.
  * ``navier_stokes_field``: nu 0.02 / 0.008 / 0.0025, vorticity
    w0 = (2 / 3 / 4) b, T = 0.4, forcing 0.1 (sin + cos) 2 pi (x + y).

Regimes ``low`` / ``medium`` / ``high`` are the `regime` option (one task per
regime); `regime_cases` draws records split evenly across the three (the
PDE-OBS allocation, e.g. 667 / 667 / 666 of 2000).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks, observations, random_fields
from posteriorjax.grids import Grid
from posteriorjax.observations import AbstractObservation, GaussianNoise
from posteriorjax.physics import burgers, darcy, heat, helmholtz, poisson, spectral
from posteriorjax.physics import navier_stokes as ns
from posteriorjax.physics import reaction_diffusion as rd
from posteriorjax.tasks import register
from posteriorjax.tasks.base import AbstractPhysics, Cases, Channel, Task, check_options

REGIMES = ("low", "medium", "high")
PATTERN_SEED = 20260804
FORECAST_FRAMES = 3  # predict frames 1..3 of 15

# name -> regime parameters (low, medium, high)
PARAMETERS = {
    "darcy_field": {"contrast": (2.0, 8.0, 32.0)},
    "poisson_field": {"amplitude": (0.5, 1.0, 2.0)},
    "helmholtz_field": {"k": (0.5, 1.0, 2.0)},
    "heat_field": {"alpha": (0.005, 0.02, 0.08)},
    "reaction_diffusion_field": {"r": (0.5, 1.5, 4.0)},
    "burgers_field": {"nu": (0.04, 0.015, 0.004)},
    "navier_stokes_field": {"nu": (0.02, 0.008, 0.0025), "scale": (2.0, 3.0, 4.0)},
}
# what the standardized condition field b is in each family (the unknown's channel name)
CONDITION_NAMES = {
    "darcy_field": "log-coefficient field b",
    "poisson_field": "source field b",
    "helmholtz_field": "source field b",
    "heat_field": "initial field b",
    "reaction_diffusion_field": "initial field b",
    "burgers_field": "initial velocity b",
    "navier_stokes_field": "initial vorticity b",
}
FINAL_TIME = {
    "heat_field": 0.25,
    "reaction_diffusion_field": 0.8,
    "burgers_field": 0.35,
    "navier_stokes_field": 0.4,
}


def _darcy_forcing(grid: Grid) -> np.ndarray:
    """f = sin 2 pi x sin 2 pi y + 0.2 sin(4 pi x + 0.3) sin 2 pi y, mean removed, `(n, n)`."""
    y, x = grid.mesh()
    f = np.sin(2 * np.pi * x) * np.sin(2 * np.pi * y)
    f = f + 0.2 * np.sin(4 * np.pi * x + 0.3) * np.sin(2 * np.pi * y)
    return f - f.mean()


def _range_normalize(b: jax.Array) -> jax.Array:
    """Affine map of b onto [-1, 1] (min -> -1, max -> 1)."""
    lo, hi = jnp.min(b), jnp.max(b)
    return 2.0 * (b - lo) / (hi - lo) - 1.0


# ----------------------------------------------------------------------------
# Physics


class RecoveryPhysics(AbstractPhysics):
    """`b (1, n, n) -> u (1, n, n)`: the family's coefficient/source from b, then the elliptic solve."""

    family: str = eqx.field(static=True)
    grid: Grid = eqx.field(static=True)
    parameter: float = eqx.field(static=True)

    def _source(self, b):
        if self.family == "darcy_field":
            a = jnp.exp(0.5 * jnp.log(self.parameter) * _range_normalize(b))
            return a, jnp.asarray(_darcy_forcing(self.grid), b.dtype)
        if self.family == "poisson_field":
            return None, self.parameter * b
        return None, b

    def __call__(self, x: jax.Array) -> jax.Array:
        a, f = self._source(x[0])
        if self.family == "darcy_field":
            return darcy.solve(a, self.grid, f)[None]
        if self.family == "poisson_field":
            return poisson.solve(f, self.grid)[None]
        return helmholtz.solve(f, self.grid, self.parameter)[None]

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """Discrete residual f - A u `(1, n, n)` of the module's own operator."""
        a, f = self._source(x[0])
        if self.family == "darcy_field":
            return darcy.residual(a, u[0], self.grid, f)[None]
        if self.family == "poisson_field":
            return poisson.residual(f, u[0], self.grid)[None]
        return helmholtz.residual(f, u[0], self.grid, self.parameter)[None]


class ForecastPhysics(AbstractPhysics):
    """`b (1, n, n) -> frames 0..3 (4, n, n)` of the family's trajectory from u0 = scale * b.

    Only the first `FORECAST_FRAMES + 1` of the 15 frames are integrated (the
    same frame spacing T / 14 and internal step as a full 15-frame run).
    """

    family: str = eqx.field(static=True)
    grid: Grid = eqx.field(static=True)
    parameter: float = eqx.field(static=True)
    scale: float = eqx.field(static=True, default=1.0)

    @property
    def frame_dt(self) -> float:
        return FINAL_TIME[self.family] / 14

    def _solve(self, u0):
        T, F = FORECAST_FRAMES * self.frame_dt, FORECAST_FRAMES + 1
        if self.family == "heat_field":
            return heat.solve(u0, self.grid, alpha=self.parameter, final_time=T, num_frames=F)
        if self.family == "reaction_diffusion_field":
            steps = spectral.steps_for(self.frame_dt, rd.DEFAULT_MAX_DT)
            return rd.solve(
                u0, self.grid, r=self.parameter, final_time=T, num_frames=F, steps_per_frame=steps
            )
        if self.family == "burgers_field":
            return burgers.solve(u0, self.grid, nu=self.parameter, final_time=T, num_frames=F)
        return ns.solve(u0, self.grid, nu=self.parameter, final_time=T, num_frames=F)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self._solve(self.scale * x[0])

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """Residual between consecutive frames `(3, n, n)` (heat: replay; others: time-centred)."""
        p, T = self.parameter, FORECAST_FRAMES * self.frame_dt
        if self.family == "heat_field":
            return heat.residual(u, self.grid, alpha=p, final_time=T)
        if self.family == "reaction_diffusion_field":
            return rd.residual(u, self.grid, r=p, final_time=T)
        if self.family == "burgers_field":
            return burgers.residual(u, self.grid, nu=p, final_time=T)
        return ns.residual(u, self.grid, nu=p, final_time=T)


# ----------------------------------------------------------------------------
# Observation of one frame of a multi-frame state


class FrameObservation(AbstractObservation):
    """Applies `inner` to frame `frame` of a state `(F, H, W)` only (the forecast input).

    `mask`, `count` and `to_grid` are those of `inner` (one field).
    """

    inner: AbstractObservation
    frame: int = eqx.field(static=True)
    shape: tuple[int, int] = eqx.field(static=True)

    def __init__(self, inner: AbstractObservation, frame: int = 0):
        self.inner = inner
        self.frame = int(frame)
        self.shape = tuple(inner.shape)

    @property
    def count(self) -> int:
        return self.inner.count

    @property
    def mask(self) -> jax.Array:
        return self.inner.mask

    def _observe(self, fields):
        return self.inner._observe(fields)

    def _fill(self, values):
        return self.inner._fill(values)

    def __call__(self, u) -> jax.Array:
        u = jnp.asarray(u)
        if u.ndim != 3 or u.shape[0] <= self.frame:
            raise ValueError(f"u: expected frames (F > {self.frame}, H, W), got shape {u.shape}")
        return self.inner(u[self.frame])


# ----------------------------------------------------------------------------
# Builders


def _regime_index(regime: str) -> int:
    checks.in_choices("regime", regime, REGIMES)
    return REGIMES.index(regime)


def build(
    name: str,
    *,
    resolution: int = 128,
    regime: str = "medium",
    pattern: str = "R50",
    pattern_seed: int = PATTERN_SEED,
    record: int = 0,
    noise_std: float = 1e-2,
    pattern_params: tuple = (),
) -> Task:
    """A field task; `pattern_params` is `((key, value), ...)` for non-preset patterns."""
    checks.in_choices("name", name, sorted(PARAMETERS))
    i = _regime_index(regime)
    check_options(resolution=resolution, noise_std=noise_std)
    params = {k: v[i] for k, v in PARAMETERS[name].items()}
    forecast = name in FINAL_TIME
    grid = Grid(resolution, 1.0, "periodic" if forecast else "dirichlet")
    inner = observations.pattern(pattern, grid, seed=pattern_seed, record=record, **dict(pattern_params))
    if forecast:
        value = params.get("alpha", params.get("r", params.get("nu")))
        scale = params.get("scale", 0.8 if name == "reaction_diffusion_field" else 1.0)
        physics = ForecastPhysics(name, grid, float(value), float(scale))
        observation = FrameObservation(inner, 0)
    else:
        physics = RecoveryPhysics(name, grid, float(next(iter(params.values()))))
        observation = inner
    config = dict(
        resolution=resolution,
        regime=regime,
        pattern=pattern,
        pattern_seed=pattern_seed,
        record=record,
        noise_std=noise_std,
        pattern_params=tuple(pattern_params),
        **params,
    )
    return Task(
        name=name,
        grid=grid,
        prior=random_fields.SmoothGRF(resolution),
        physics=physics,
        observation=observation,
        noise=GaussianNoise(noise_std),
        field_stats=(0.0, 1.0),
        config=tuple(sorted(config.items())),
        channels=(Channel(CONDITION_NAMES[name], "-"),),
    )


def regime_counts(num: int) -> tuple[int, int, int]:
    """Split `num` records evenly over (low, medium, high), remainder to the first (667/667/666)."""
    num = checks.positive_int("num", num)
    base, extra = divmod(num, 3)
    return tuple(base + (1 if r < extra else 0) for r in range(3))


def regime_cases(name: str, seed: int, num: int, **options) -> tuple[Cases, np.ndarray]:
    """`num` cases split evenly across the regimes, in blocks low, medium, high.

    Regime r draws its cases with `Task.cases(3 * seed + r, count_r)`, so the
    blocks never share keys. Returns `(Cases, regime index (num,))`.
    """
    if "regime" in options:
        raise ValueError("options: regime_cases sets `regime` itself")
    parts, index = [], []
    for r, count in enumerate(regime_counts(num)):
        if count == 0:
            continue
        task = build(name, regime=REGIMES[r], **options)
        parts.append(task.cases(3 * seed + r, count))
        index.append(np.full(count, r))
    cases = Cases(*(jnp.concatenate(field) for field in zip(*parts, strict=True)))
    return cases, np.concatenate(index)


BUILDERS: dict[str, Callable[..., Task]] = {}
for _name in PARAMETERS:
    BUILDERS[_name] = functools.partial(build, _name)
    register(_name, BUILDERS[_name])
