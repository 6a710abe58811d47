"""Interface-sensing tasks: recover a star-shaped interface from sensors.

Unknown: m = 17 interface coefficients c = (c_0, a_1..a_8, b_1..b_8) of

    r(theta) = c_0 + sum_{k=1..8} a_k cos(k theta) + b_k sin(k theta),

stored as an unknown of shape `(17, 1, 1)` (channels = coefficients), rendered
on the grid as the smooth indicator chi(x) = sigmoid((r(theta(x)) - rho(x)) / eps)
about the centre (L/2, L/2), eps = `width` grid spacings. Prior: independent
Gaussians, c_0 ~ N(0.25, 0.02^2), a_k, b_k ~ N(0, (0.03 / k)^2) (radius in
units of L = 1). Three regimes:

* ``interface_potential`` (diffuse-domain battery potential): -div(a grad u) = f
  with a = 1 + 9 chi, u = 0 on the boundary (`physics.darcy`); sensors on the
  ring of nodes next to the boundary, plus (`auxiliary=True`) two auxiliary
  channels: the inclusion area (integral of chi) and the energy (integral of
  f u of the final frame); `num_sensors=0` observes these two channels alone
  (Battery M0 of the geometry study). History (`frames` = F > 0): the potential is
  quasi-static, and the applied load turns during the history, frame k of
  0..F having f_k = 1 + x cos(phi_k) + y sin(phi_k), phi_k = (pi / 2)(F - k) / F;
  the final frame (and `frames=0`) has f = 1 + x.
* ``interface_meltpool`` (low Peclet, |b| L / kappa = 1 / 0.13 = 7.7): heat source
  chi in a flow b = (1, 0), kappa = 0.13, up to t = 0.5; steady (`frames=0`) or
  transient from u = 0 with an observation history of `frames` earlier
  snapshots plus the final one; sensors on the ring of nodes n/8 in from the edge.
* ``interface_transport`` (Flooding, high Peclet, |b| L / kappa = 1044): the
  concentration chi transported by b = (1, 0.3) with kappa = 1e-3 up to t = 0.1;
  `frames` earlier snapshots plus the final one. Sensors (`_arc_sensors`): the
  nodes nearest to `num_sensors` points evenly spaced on the downstream arc
  (span 0.63 x 360 deg, centred on the +x direction) of the prior-mean front at
  t = 0.1, i.e. the circle of radius 0.25 about (0.5, 0.5) + b t.

Advection schemes (`scheme`): the meltpool regime uses first-order upwind
(`physics.advection_diffusion`; its numerical diffusion |b| h / 2 is 6 % of
kappa at 64^2). The transport regime defaults to ``"spectral"``: the exact
solution u(t) = F^-1[exp(-(kappa |k|^2 + i b.k) t) F[chi]] of the constant-
coefficient equation in the open plane, the grid being an observation window
(`free_space_propagator`: FFT on the window zero-padded to twice its size, so
fluid that leaves the window is gone; it would wrap back only after travelling
another window width, against b t = 0.1 L here). It is linear in chi
with no numerical diffusion and no limiter, so the coefficient-to-observation
map is smooth. ``"muscl"`` and ``"upwind"`` remain available there (Dirichlet
walls, `physics.advection_diffusion`); MUSCL's limiter makes the map only
piecewise smooth.

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

from posteriorjax import checks
from posteriorjax.grids import Grid
from posteriorjax.observations import AbstractObservation, GaussianNoise, MaskObservation
from posteriorjax.physics import advection_diffusion as ad
from posteriorjax.physics import darcy
from posteriorjax.tasks import register
from posteriorjax.tasks.base import AbstractPhysics, Channel, Task, check_options

NUM_MODES = 8
NUM_COEFFICIENTS = 2 * NUM_MODES + 1
REGIMES = ("potential", "meltpool", "transport")
# the unknown's channels: radius coefficients in units of the domain side L
_MODES = range(1, NUM_MODES + 1)
COEFFICIENT_CHANNELS = tuple(
    Channel(name, "L") for name in ("c_0", *(f"a_{k}" for k in _MODES), *(f"b_{k}" for k in _MODES))
)


def radius(c: jax.Array, theta: jax.Array) -> jax.Array:
    """r(theta) for coefficients `c (17,)`, any shape of `theta`."""
    k = jnp.arange(1, NUM_MODES + 1)
    kt = theta[..., None] * k
    return c[0] + jnp.sum(c[1 : NUM_MODES + 1] * jnp.cos(kt) + c[NUM_MODES + 1 :] * jnp.sin(kt), axis=-1)


def indicator(c: jax.Array, grid: Grid, width: float = 1.0) -> jax.Array:
    """Smooth indicator `(n, n)` of {rho < r(theta)} on the grid nodes."""
    x = _node_coordinates(grid) - 0.5 * grid.length
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


TRANSPORT_SCHEMES = (*ad.SCHEMES, "spectral")
MELTPOOL_KAPPA = 0.13
TRANSPORT_VELOCITY = (1.0, 0.3)
TRANSPORT_KAPPA = 1e-3
TRANSPORT_TIME = 0.1
ARC_SPAN = 0.63


def _node_coordinates(grid: Grid) -> np.ndarray:
    """Coordinates `(n,)` of the grid nodes along one axis (units of L)."""
    return (np.arange(grid.n) + (1 if grid.bc == "dirichlet" else 0.5)) * grid.spacing


def free_space_propagator(grid: Grid, velocity, kappa: float, t: float) -> np.ndarray:
    """`(2n, 2n)` complex Fourier multiplier exp(-(kappa |k|^2 + i b.k) t) on the doubled lattice.

    `_propagate` zero-pads the n x n window to 2n x 2n nodes (period 2n h), applies
    this multiplier (wave numbers k = 2 pi fftfreq(2n, h), `[y, x]`) and crops the
    window: the exact solution of u_t + b . grad u = kappa lap u in the open plane
    for data inside the window, as long as the transported field stays within n
    nodes of it (no wrap-around).
    """
    k = 2 * np.pi * np.fft.fftfreq(2 * grid.n, grid.spacing)
    ky, kx = np.meshgrid(k, k, indexing="ij")
    bx, by = velocity
    return np.exp(-(kappa * (kx**2 + ky**2) + 1j * (bx * kx + by * ky)) * t)


def _propagate(u0: jax.Array, multiplier: np.ndarray) -> jax.Array:
    """`(..., n, n)`: the window of ifft2(fft2(pad(u0)) * multiplier), multiplier `(..., 2n, 2n)`."""
    n = u0.shape[-1]
    cdtype = jnp.complex128 if u0.dtype == jnp.float64 else jnp.complex64
    padded = jnp.pad(u0, [(0, 0)] * (u0.ndim - 2) + [(0, n), (0, n)])
    out = jnp.fft.ifft2(jnp.fft.fft2(padded) * jnp.asarray(multiplier, cdtype))
    return jnp.real(out[..., :n, :n]).astype(u0.dtype)


class InterfacePhysics(AbstractPhysics):
    """`x (17, 1, 1) -> state (C_u, n, n)`; see the module doc for the regimes and channels.

    States: potential `(F + 3, n, n)` (the F + 1 potential frames, chi, f u of the
    final frame); meltpool steady `(1, n, n)`; transient regimes `(F + 1, n, n)`.
    """

    grid: Grid = eqx.field(static=True)
    regime: str = eqx.field(static=True)
    frames: int = eqx.field(static=True, default=0)
    width: float = eqx.field(static=True, default=1.0)
    scheme: str = eqx.field(static=True, default="upwind")

    def _setup(self) -> tuple[tuple[float, float], float, float]:
        """`((b_x, b_y), kappa, t_final)` of the advection-diffusion regimes."""
        if self.regime == "meltpool":
            return (1.0, 0.0), MELTPOOL_KAPPA, 0.5
        return TRANSPORT_VELOCITY, TRANSPORT_KAPPA, TRANSPORT_TIME

    def _steps(self) -> int:
        (bx, by), _, t_final = self._setup()
        per = self.frames + 1
        cfl = ad.courant_limit(self.scheme)
        n = int(np.ceil(t_final * (abs(bx) + abs(by)) / (cfl * self.grid.spacing)))
        return per * int(np.ceil(n / per))

    def sources(self, dtype) -> jax.Array:
        """Potential regime: the loads `(F + 1, n, n)` of the frames (see the module doc)."""
        x = _node_coordinates(self.grid)
        xx, yy = np.meshgrid(x, x)  # [y, x]
        f = self.frames
        phi = np.pi / 2 * (f - np.arange(f + 1)) / max(f, 1)
        loads = 1.0 + xx * np.cos(phi)[:, None, None] + yy * np.sin(phi)[:, None, None]
        return jnp.asarray(loads, dtype)

    def _multipliers(self, dt: float, count: int) -> np.ndarray:
        velocity, kappa, _ = self._setup()
        times = dt * (np.arange(count) + 1)
        return np.stack([free_space_propagator(self.grid, velocity, kappa, t) for t in times])

    def __call__(self, x: jax.Array) -> jax.Array:
        chi = indicator(x[:, 0, 0], self.grid, self.width)
        dtype = chi.dtype
        if self.regime == "potential":
            f = self.sources(dtype)
            a = 1.0 + 9.0 * chi
            u = jax.vmap(lambda fk: darcy.solve(a, self.grid, fk))(f)
            return jnp.concatenate([u, chi[None], (f[-1] * u[-1])[None]])
        (bx, by), kappa, t_final = self._setup()
        if self.scheme == "spectral":
            per = self.frames + 1
            return _propagate(chi[None], self._multipliers(t_final / per, per))
        velocity = ad.uniform_velocity(self.grid, bx, by, dtype)
        if self.regime == "meltpool" and self.frames == 0:
            return ad.solve_steady(velocity, kappa, self.grid, chi)[None]
        steps = self._steps()
        if self.regime == "meltpool":
            u0, f = jnp.zeros_like(chi), chi
        else:
            u0, f = chi, 0.0
        return ad.solve_transient(
            u0,
            velocity,
            kappa,
            self.grid,
            f=f,
            t_final=t_final,
            num_steps=steps,
            num_frames=self.frames + 1,
            scheme=self.scheme,
        )

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
        """Potential / steady: the discrete PDE residual of every frame. Transient: each frame minus
        the rollout (or exact propagation) from the previous frame (from the initial state for the first)."""
        chi = indicator(x[:, 0, 0], self.grid, self.width)
        if self.regime == "potential":
            f = self.sources(chi.dtype)
            a = 1.0 + 9.0 * chi
            frames = u[: self.frames + 1]
            res = jax.vmap(lambda uk, fk: darcy.residual(a, uk, self.grid, fk))(frames, f)
            return jnp.concatenate([res, (u[-2] - chi)[None], (u[-1] - f[-1] * frames[-1])[None]])
        (bx, by), kappa, t_final = self._setup()
        per = self.frames + 1
        if self.scheme == "spectral":  # the exact solution at every frame time (the window forgets outflow)
            return u - _propagate(chi[None], self._multipliers(t_final / per, per))
        velocity = ad.uniform_velocity(self.grid, bx, by, chi.dtype)
        if self.regime == "meltpool" and self.frames == 0:
            return ad.residual_steady(u[0], velocity, kappa, self.grid, chi)[None]
        steps = self._steps() // per
        starts = jnp.concatenate([(jnp.zeros_like(chi) if self.regime == "meltpool" else chi)[None], u[:-1]])
        f = chi if self.regime == "meltpool" else 0.0

        def advance(u0):
            return ad.solve_transient(
                u0,
                velocity,
                kappa,
                self.grid,
                f=f,
                t_final=t_final / per,
                num_steps=steps,
                num_frames=1,
                scheme=self.scheme,
            )[0]

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
        if self.sensor_channels:
            values = self.sensors(u[jnp.asarray(self.sensor_channels)])
        else:  # the auxiliary totals only (`num_sensors=0`)
            values = jnp.zeros((0,), u.dtype)
        if not self.total_channels:
            return values
        totals = jnp.sum(u[jnp.asarray(self.total_channels)], axis=(-2, -1)) * self.cell_area
        return jnp.concatenate([values, totals])

    @property
    def channel_sizes(self) -> tuple[int, ...]:
        """Sizes of the noise channels: one per sensor frame, one per total."""
        return (self.count,) * len(self.sensor_channels) + (1,) * len(self.total_channels)


def _ring_sensors(grid: Grid, num: int, *, inset: int = 0) -> MaskObservation:
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


def _arc_sensors(grid: Grid, num: int, centre, radius: float, span: float, *, direction: float = 0.0):
    """Nodes nearest to `num` points evenly spaced on an arc of the circle (`centre`, `radius`).

    The arc spans `span` x 360 degrees centred on the angle `direction` (radians);
    point j sits at direction + span 2 pi ((j + 1/2) / num - 1/2).
    """
    if not 0.0 < span <= 1.0:
        raise ValueError(f"span: expected a fraction of the circle in (0, 1], got {span!r}")
    theta = direction + span * 2 * np.pi * ((np.arange(num) + 0.5) / num - 0.5)
    offset = 1.0 if grid.bc == "dirichlet" else 0.5
    ix = np.round((centre[0] + radius * np.cos(theta)) / grid.spacing - offset).astype(int)
    iy = np.round((centre[1] + radius * np.sin(theta)) / grid.spacing - offset).astype(int)
    if np.any((ix < 0) | (ix >= grid.n) | (iy < 0) | (iy >= grid.n)):
        raise ValueError(f"radius: the arc of radius {radius} about {tuple(centre)} leaves the grid")
    mask = np.zeros(grid.shape, bool)
    mask[iy, ix] = True
    if mask.sum() != num:
        raise ValueError(
            f"num_sensors: {num} sensors on the arc fall on {int(mask.sum())} distinct nodes of a "
            f"{grid.n}-point grid; use a finer grid or fewer sensors"
        )
    return MaskObservation(
        mask, name="arc", params=(("num", num), ("radius", radius), ("span", span), ("centre", tuple(centre)))
    )


def _noise_std(physics, observation: InterfaceObservation, x0, strength: float, floor: float):
    y0 = np.asarray(eqx.filter_jit(lambda p, o, x: o(p(x)))(physics, observation, x0), np.float64)
    stds, start = [], 0
    for size in observation.channel_sizes:
        block = y0[start : start + size]
        stds.append(np.full(size, strength * np.sqrt(np.mean(block**2)) + floor))
        start += size
    return np.concatenate(stds)


def build(
    name: str = "interface_potential",
    *,
    regime: str = "potential",
    resolution: int = 64,
    frames: int = 0,
    num_sensors: int | None = None,
    noise_std: float = 0.01,
    noise_floor: float = 1e-6,
    width: float = 1.0,
    scheme: str | None = None,
    auxiliary: bool | None = None,
    prior_shift: float = 0.0,
    prior_scale: float = 1.0,
) -> Task:
    """One interface task (see the module doc).

    `auxiliary`: the potential regime's area and energy channels (default: on for potential). `prior_shift`,
    `prior_scale`: the coefficient distribution the task draws from (`shifted_prior`;
    the defaults give the training prior); the noise is always set at the training
    prior's mean, so shifted tasks share the observation model.
    """
    checks.in_choices("regime", regime, REGIMES)
    check_options(resolution=resolution, noise_std=noise_std, width=width)
    checks.positive("noise_floor", noise_floor, allow_zero=True)
    if num_sensors is not None and not (regime == "potential" and num_sensors == 0):
        checks.positive_int("num_sensors", num_sensors)
    if not isinstance(frames, int) or frames < 0:
        raise ValueError(f"frames: expected a non-negative integer, got {frames!r}")
    if auxiliary is None:
        auxiliary = regime == "potential"
    if auxiliary and regime != "potential":
        raise ValueError(f"auxiliary: only the potential regime has auxiliary channels, not {regime}")
    default_scheme = {"potential": "upwind", "meltpool": "upwind", "transport": "spectral"}[regime]
    scheme = default_scheme if scheme is None else scheme
    allowed = TRANSPORT_SCHEMES if regime == "transport" else ad.SCHEMES
    if scheme not in allowed:
        raise ValueError(f"scheme: expected one of {allowed} for the {regime} regime, got {scheme!r}")
    grid = Grid(resolution, 1.0, "dirichlet")
    defaults = {"potential": 16, "meltpool": 12, "transport": 13}
    num_sensors = defaults[regime] if num_sensors is None else num_sensors
    prior = default_prior()
    physics = InterfacePhysics(grid, regime, frames, float(width), scheme)
    if regime == "potential":
        if num_sensors == 0 and not (auxiliary and frames == 0):
            raise ValueError(
                f"num_sensors: 0 (the auxiliary channels alone) needs auxiliary=True and frames=0, "
                f"got auxiliary={auxiliary}, frames={frames}"
            )
        # num_sensors = 0: the sensor object stays (its mask for rasters) but no frame is read
        sensors = _ring_sensors(grid, num_sensors or defaults[regime])
        observation = InterfaceObservation(
            sensors=sensors,
            shape=grid.shape,
            sensor_channels=tuple(range(frames + 1)) if num_sensors else (),
            total_channels=(frames + 1, frames + 2) if auxiliary else (),
            cell_area=grid.spacing**2,
        )
    else:
        if regime == "transport":
            (bx, by), t = TRANSPORT_VELOCITY, TRANSPORT_TIME
            centre = (0.5 + bx * t, 0.5 + by * t)
            sensors = _arc_sensors(grid, num_sensors, centre, float(prior.mean[0]), ARC_SPAN)
        else:
            sensors = _ring_sensors(grid, num_sensors, inset=max(1, resolution // 8))
        observation = InterfaceObservation(
            sensors=sensors, shape=grid.shape, sensor_channels=tuple(range(frames + 1))
        )
    std = _noise_std(physics, observation, prior.mean.reshape(prior.shape), noise_std, noise_floor)
    config = dict(
        regime=regime,
        resolution=resolution,
        frames=frames,
        num_sensors=num_sensors,
        noise_std=noise_std,
        noise_floor=noise_floor,
        width=width,
        scheme=scheme,
        auxiliary=auxiliary,
        prior_shift=prior_shift,
        prior_scale=prior_scale,
    )
    return Task(
        name=name,
        grid=grid,
        prior=shifted_prior(prior, prior_shift, prior_scale),
        physics=physics,
        observation=observation,
        noise=GaussianNoise(jnp.asarray(std, jnp.float32)),
        field_stats=(float(jnp.mean(prior.mean)), float(jnp.mean(prior.std))),
        config=tuple(sorted(config.items())),
        channels=COEFFICIENT_CHANNELS,
    )


def shifted_prior(prior: InterfacePrior, shift: float = 0.0, scale: float = 1.0) -> InterfacePrior:
    """The out-of-distribution coefficient law: every coefficient's mean moved by `shift` of its
    std (mean + shift std) and its std multiplied by `scale` (shift = 0, scale = 1: `prior` itself)."""
    if not (np.isfinite(shift) and np.isfinite(scale) and scale > 0):
        raise ValueError(f"prior_shift, prior_scale: expected finite, scale > 0, got {shift!r}, {scale!r}")
    if shift == 0.0 and scale == 1.0:
        return prior
    return InterfacePrior(prior.mean + shift * prior.std, scale * prior.std)


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
