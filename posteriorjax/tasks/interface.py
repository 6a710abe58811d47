"""Interface-sensing tasks: recover a star-shaped interface from sensors.

Unknown: m = 17 interface coefficients c = (c_0, a_1..a_8, b_1..b_8) of

    r(theta) = c_0 + sum_{k=1..8} a_k cos(k theta) + b_k sin(k theta),

stored as an unknown of shape `(17, 1, 1)` (channels = coefficients), rendered
on the grid as the smooth indicator chi(x) = sigmoid((r(theta(x)) - rho(x)) / eps)
about the centre (L/2, L/2), eps = `width` grid spacings. Prior: independent
Gaussians, c_0 ~ N(0.25, 0.02^2), a_k, b_k ~ N(0, (0.03 / k)^2) (radius in
units of L = 1). Three regimes:

* ``interface_potential`` (diffuse-domain potential): -div(a grad u) = f with
  a = 1 + 9 chi, f = 1 + x, u = 0 on the boundary (`physics.darcy`); sensors on
  the ring of nodes next to the boundary, plus two auxiliary channels: the
  inclusion area (integral of chi) and the energy (integral of f u).
* ``interface_meltpool`` (low Peclet, |b| L / kappa = 5): heat source chi in a
  flow b = (1, 0), kappa = 0.2; steady (`frames=0`) or transient from u = 0
  with an observation history of `frames` earlier snapshots plus the final one.
* ``interface_transport`` (high Peclet, 1000): concentration chi transported by
  b = (1, 0.3) with kappa = 1e-3 up to t = 0.3; `frames` earlier snapshots plus the final one.

(`physics.advection_diffusion`; `scheme` selects its advection scheme: by default
first-order upwind for the meltpool regime and second-order MUSCL for transport,
where upwind numerical diffusion ``|b| h / 2`` would exceed kappa several times over.)

Noise: per channel (sensor values of one
frame, each auxiliary total), std = 1% of the channel's RMS at the prior-mean
interface, plus an absolute floor of 1e-6 (`noise_std` rescales the 1%).
`observation_map(task)` gives the coefficient-to-observation map and working
point that `metrics.geometry.analyze` takes.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax.grids import Grid
from posteriorjax.observations import AbstractObservation, GaussianNoise, MaskObservation
from posteriorjax.physics import advection_diffusion as ad
from posteriorjax.physics import darcy
from posteriorjax.tasks import register
from posteriorjax.tasks.base import AbstractPhysics, Task

NUM_MODES = 8
NUM_COEFFICIENTS = 2 * NUM_MODES + 1
REGIMES = ("potential", "meltpool", "transport")


def radius(c: jax.Array, theta: jax.Array) -> jax.Array:
    """r(theta) for coefficients `c (17,)`, any shape of `theta`."""
    k = jnp.arange(1, NUM_MODES + 1)
    kt = theta[..., None] * k
    return c[0] + jnp.sum(c[1 : NUM_MODES + 1] * jnp.cos(kt) + c[NUM_MODES + 1 :] * jnp.sin(kt), axis=-1)


def indicator(c: jax.Array, grid: Grid, width: float = 1.0) -> jax.Array:
    """Smooth indicator `(n, n)` of {rho < r(theta)} on the grid nodes."""
    x = (np.arange(grid.n) + (1 if grid.bc == "dirichlet" else 0.5)) * grid.spacing - 0.5 * grid.length
    xx, yy = np.meshgrid(x, x)  # [y, x]
    rho = jnp.asarray(np.hypot(xx, yy), c.dtype)
    theta = jnp.asarray(np.arctan2(yy, xx), c.dtype)
    return jax.nn.sigmoid((radius(c, theta) - rho) / (width * grid.spacing))


class InterfacePrior(eqx.Module):
    """Independent Gaussian coefficients, samples `(17, 1, 1)`."""

    mean: jax.Array
    std: jax.Array

    @property
    def shape(self) -> tuple[int, int, int]:
        return (NUM_COEFFICIENTS, 1, 1)

    def latent(self, key) -> jax.Array:
        return jr.normal(key, self.shape)

    def transform(self, latent: jax.Array) -> jax.Array:
        return self.mean.reshape(self.shape) + self.std.reshape(self.shape) * latent

    def sample(self, key) -> jax.Array:
        return self.transform(self.latent(key))


def default_prior(radius0: float = 0.25, radius_std: float = 0.02, mode_std: float = 0.03) -> InterfacePrior:
    k = np.arange(1, NUM_MODES + 1)
    std = np.concatenate([[radius_std], mode_std / k, mode_std / k])
    mean = np.zeros(NUM_COEFFICIENTS)
    mean[0] = radius0
    return InterfacePrior(jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32))


class InterfacePhysics(AbstractPhysics):
    """`x (17, 1, 1) -> state (C_u, n, n)`; see the module doc for the regimes and channels."""

    grid: Grid = eqx.field(static=True)
    regime: str = eqx.field(static=True)
    frames: int = eqx.field(static=True, default=0)
    width: float = eqx.field(static=True, default=1.0)
    scheme: str = eqx.field(static=True, default="upwind")

    def _setup(self) -> tuple[tuple[float, float], float, float]:
        """`((b_x, b_y), kappa, t_final)` of the advection-diffusion regimes."""
        if self.regime == "meltpool":
            return (1.0, 0.0), 0.2, 0.5
        return (1.0, 0.3), 1e-3, 0.3

    def _steps(self) -> int:
        (bx, by), _, t_final = self._setup()
        per = self.frames + 1
        cfl = ad.courant_limit(self.scheme)
        n = int(np.ceil(t_final * (abs(bx) + abs(by)) / (cfl * self.grid.spacing)))
        return per * int(np.ceil(n / per))

    def _source_x(self, dtype):
        x = (np.arange(self.grid.n) + 1) * self.grid.spacing
        return jnp.asarray(np.broadcast_to(1.0 + x[None, :], self.grid.shape), dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        chi = indicator(x[:, 0, 0], self.grid, self.width)
        dtype = chi.dtype
        if self.regime == "potential":
            f = self._source_x(dtype)
            u = darcy.solve(1.0 + 9.0 * chi, self.grid, f)
            return jnp.stack([u, chi, f * u])
        (bx, by), kappa, t_final = self._setup()
        velocity = ad.uniform_velocity(self.grid, bx, by, dtype)
        if self.regime == "meltpool" and self.frames == 0:
            return ad.solve_steady(velocity, kappa, self.grid, chi)[None]
        steps = self._steps()
        if self.regime == "meltpool":
            u0, f = jnp.zeros_like(chi), chi
        else:
            u0, f = chi, 0.0
        return ad.solve_transient(
            u0, velocity, kappa, self.grid, f=f, t_final=t_final, num_steps=steps,
            num_frames=self.frames + 1, scheme=self.scheme,
        )  # fmt: skip

    def valid(self, x: jax.Array) -> jax.Array:
        """Whether `x (17, 1, 1)` renders a finite indicator: sum_k |c_k| finite (boolean scalar).

        The indicator is a sigmoid in [0, 1], so every regime's solver accepts it
        (potential: a = 1 + 9 chi in [1, 10], positive). The only finite
        coefficients outside the domain are those whose Fourier sum r(theta)
        overflows: terms of opposite sign that round to +inf and -inf give a NaN
        indicator (or not, depending on the order XLA sums in). The bound
        |r(theta)| <= sum_k |c_k| excludes that in any order; non-finite
        coefficients fail it too.
        """
        return jnp.isfinite(jnp.sum(jnp.abs(x)))

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """Potential / steady: the discrete PDE residual. Transient: each frame minus the rollout
        of the IMEX scheme from the previous frame (from the initial state for the first)."""
        chi = indicator(x[:, 0, 0], self.grid, self.width)
        if self.regime == "potential":
            f = self._source_x(chi.dtype)
            return jnp.stack(
                [darcy.residual(1.0 + 9.0 * chi, u[0], self.grid, f), u[1] - chi, u[2] - f * u[0]]
            )
        (bx, by), kappa, t_final = self._setup()
        velocity = ad.uniform_velocity(self.grid, bx, by, chi.dtype)
        if self.regime == "meltpool" and self.frames == 0:
            return ad.residual_steady(u[0], velocity, kappa, self.grid, chi)[None]
        per = self.frames + 1
        steps = self._steps() // per
        starts = jnp.concatenate([(jnp.zeros_like(chi) if self.regime == "meltpool" else chi)[None], u[:-1]])
        f = chi if self.regime == "meltpool" else 0.0

        def advance(u0):
            return ad.solve_transient(
                u0, velocity, kappa, self.grid, f=f, t_final=t_final / per, num_steps=steps, num_frames=1,
                scheme=self.scheme,
            )[0]  # fmt: skip

        return u - jax.vmap(advance)(starts)


class InterfaceObservation(AbstractObservation):
    """Point sensors on the channels `sensor_channels` of the state, then totals of `total_channels`.

    `__call__(u (C_u, n, n)) -> (len(sensor_channels) * count + len(total_channels),)`;
    totals are integrals (sum times cell area). `to_grid` covers the sensor part.
    """

    sensors: MaskObservation
    shape: tuple[int, int] = eqx.field(static=True)
    sensor_channels: tuple[int, ...] = eqx.field(static=True)
    total_channels: tuple[int, ...] = eqx.field(static=True, default=())
    cell_area: float = eqx.field(static=True, default=1.0)

    @property
    def count(self) -> int:
        return self.sensors.count

    @property
    def mask(self) -> jax.Array:
        return self.sensors.mask

    def _observe(self, fields):
        return self.sensors._observe(fields)

    def _fill(self, values):
        return self.sensors._fill(values)

    def __call__(self, u) -> jax.Array:
        u = jnp.asarray(u)
        values = self.sensors(u[jnp.asarray(self.sensor_channels)])
        if not self.total_channels:
            return values
        totals = jnp.sum(u[jnp.asarray(self.total_channels)], axis=(-2, -1)) * self.cell_area
        return jnp.concatenate([values, totals])

    @property
    def channel_sizes(self) -> tuple[int, ...]:
        """Sizes of the noise channels: one per sensor frame, one per total."""
        return (self.count,) * len(self.sensor_channels) + (1,) * len(self.total_channels)


def ring_sensors(grid: Grid, num: int, *, inset: int = 0) -> MaskObservation:
    """`num` sensors evenly spaced (by perimeter) on the ring of nodes `inset` in from the edge."""
    n = grid.n - 2 * inset
    ring = (
        [(0, j) for j in range(n - 1)]
        + [(i, n - 1) for i in range(n - 1)]
        + [(n - 1, j) for j in range(n - 1, 0, -1)]
        + [(i, 0) for i in range(n - 1, 0, -1)]
    )
    pick = np.round(np.linspace(0, len(ring), num, endpoint=False)).astype(int)
    mask = np.zeros(grid.shape, bool)
    for i, j in (ring[p] for p in pick):
        mask[i + inset, j + inset] = True
    if mask.sum() != num:
        raise ValueError(f"num_sensors: {num} sensors do not fit on the ring of a {grid.n}-point grid")
    return MaskObservation(mask, name="ring", params=(("num", num), ("inset", inset)))


def _noise_std(physics, observation: InterfaceObservation, x0, strength: float, floor: float):
    y0 = np.asarray(observation(physics(x0)), np.float64)
    stds, start = [], 0
    for size in observation.channel_sizes:
        block = y0[start : start + size]
        stds.append(np.full(size, strength * np.sqrt(np.mean(block**2)) + floor))
        start += size
    return np.concatenate(stds)


def build(
    name: str = "interface_potential",
    regime: str = "potential",
    resolution: int = 64,
    frames: int = 0,
    num_sensors: int | None = None,
    noise_std: float = 0.01,
    noise_floor: float = 1e-6,
    width: float = 1.0,
    scheme: str | None = None,
) -> Task:
    if regime not in REGIMES:
        raise ValueError(f"regime: expected one of {REGIMES}, got {regime!r}")
    if not isinstance(frames, int) or frames < 0:
        raise ValueError(f"frames: expected a non-negative integer, got {frames!r}")
    if regime == "potential" and frames:
        raise ValueError(f"frames: the potential regime is steady (frames=0), got {frames}")
    scheme = ("muscl" if regime == "transport" else "upwind") if scheme is None else scheme
    if scheme not in ad.SCHEMES:
        raise ValueError(f"scheme: expected one of {ad.SCHEMES}, got {scheme!r}")
    grid = Grid(resolution, 1.0, "dirichlet")
    defaults = {"potential": 16, "meltpool": 12, "transport": 13}
    num_sensors = defaults[regime] if num_sensors is None else num_sensors
    prior = default_prior()
    physics = InterfacePhysics(grid, regime, frames, float(width), scheme)
    if regime == "potential":
        sensors = ring_sensors(grid, num_sensors)
        observation = InterfaceObservation(
            sensors=sensors,
            shape=grid.shape,
            sensor_channels=(0,),
            total_channels=(1, 2),
            cell_area=grid.spacing**2,
        )
    else:
        sensors = ring_sensors(grid, num_sensors, inset=max(1, resolution // 8))
        observation = InterfaceObservation(
            sensors=sensors, shape=grid.shape, sensor_channels=tuple(range(frames + 1))
        )
    std = _noise_std(physics, observation, prior.mean.reshape(prior.shape), noise_std, noise_floor)
    config = dict(
        regime=regime, resolution=resolution, frames=frames, num_sensors=num_sensors,
        noise_std=noise_std, noise_floor=noise_floor, width=width, scheme=scheme,
    )  # fmt: skip
    return Task(
        name=name,
        grid=grid,
        prior=prior,
        physics=physics,
        observation=observation,
        noise=GaussianNoise(jnp.asarray(std, jnp.float32)),
        field_stats=(float(jnp.mean(prior.mean)), float(jnp.mean(prior.std))),
        config=tuple(sorted(config.items())),
    )


def observation_map(task: Task):
    """`(observe_fn, c0, noise_cov)`: map `(17,) -> (p,)` (noise free), prior mean, variances `(p,)`."""
    shape = task.unknown_shape
    c0 = task.prior.mean

    def observe(c):
        return task.forward(c.reshape(shape))

    return observe, c0, jnp.broadcast_to(task.noise.std**2, (task.num_observations,))


register("interface_potential", functools.partial(build, "interface_potential", regime="potential"))
register("interface_meltpool", functools.partial(build, "interface_meltpool", regime="meltpool"))
register(
    "interface_transport", functools.partial(build, "interface_transport", regime="transport", frames=12)
)
