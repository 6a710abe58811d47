"""The CO2 storage (CCS) task of the posterior-matching benchmark.

Unknown: horizontal permeability x (1, nz, nr) in mD on the radial grid (default 64
layers x 200 graded radial cells, `physics.co2.RadialGrid`), log-normal with per-sample
mean ~ U[10, 500] mD, std ~ U[1, 500] mD, radial correlation length ~ U[359, 35900] m,
vertical ~ U[14, 56] m (`random_fields.AnisotropicLogNormal` on the cell centres).
Physics: 0.36 Mt/year of CO2 injected for 30 years (`physics.co2`); the state is the
CO2 saturation (1, nz, nr); `transport="implicit"` uses the sequential-implicit
saturation step instead of the IMPES substeps (`physics.co2.CO2Config.transport`; the
default IMPES task keeps its config hash). Observation: saturation on two well columns, the injector
(radial index 0) and a monitor (index 50, ~0.5 km away), noise std 0.04.

`Task.grid` holds the `RadialGrid` (static metadata; the grid is not square).

`TINY` is the CPU-seconds scale of the task (12 layers x 24 radial cells, half a year, two
pressure steps, wells at radial indices 0 and 10) that the tiny training configs and the
surrogate-reference tests use. `MEDIUM` is the scale of the main table's `medium` config (16 layers x
48 radial cells to the same 100 km, two years of injection in eight pressure steps of the published
0.25 years, wells at radial indices 0 and 16, the monitor about 350 m from the injector, where the
buoyant CO2 tongue arrives within the two years).
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax import checks, random_fields
from posteriorjax.observations import ColumnObservation, GaussianNoise
from posteriorjax.physics import co2, linear
from posteriorjax.tasks import register
from posteriorjax.tasks.base import AbstractPhysics, Channel, Task, check_options

TINY = dict(nz=12, nr=24, years=0.5, pressure_steps=2, wells=(0, 10))
MEDIUM = dict(nz=16, nr=48, years=2.0, pressure_steps=8, wells=(0, 16))


class CCSPhysics(AbstractPhysics):
    """`perm (1, nz, nr) [mD] -> CO2 saturation (1, nz, nr)` after the injection period."""

    grid: co2.RadialGrid = eqx.field(static=True)
    config: co2.CO2Config = eqx.field(static=True)
    porosity: float = eqx.field(static=True, default=0.2)

    def __call__(self, x: jax.Array) -> jax.Array:
        return co2.solve(x[0], self.porosity, grid=self.grid, config=self.config)[None]

    def valid(self, x: jax.Array) -> jax.Array:
        """The solver's domain: every permeability finite and normal in m^2 (boolean scalar).

        Normal: `x * co2.MILLIDARCY` (m^2) at least `finfo(dtype).tiny` of the
        dtype the solver runs in, i.e. x above about 1.2e-23 mD in float32 and
        2.3e-293 mD in float64. `co2.solve` raises on non-positive or
        non-finite values itself; below the normal range the radial
        transmissibilities (geometric factor / permeability) overflow and the
        run returns zero saturation everywhere instead of an error.
        Not part of the domain: a permeability so high that its CFL limit needs
        more than `config.max_substeps` saturation substeps per pressure step
        stops the run (`eqx.error_if`), a limit of the time stepping.
        """
        dtype = linear.float_dtype(x)
        x = jnp.asarray(x, dtype)
        return jnp.all(jnp.isfinite(x) & (x * co2.MILLIDARCY >= jnp.finfo(dtype).tiny))

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        """Pressure-equation residual (m^3/s) at the saturation `u`."""
        return co2.residual(x[0], u[0], grid=self.grid, config=self.config)[None]


def lognormal_stats(mean_range, std_range) -> tuple[float, float]:
    """(E K, Std K) of the hierarchical log-normal prior: E[mean], sqrt(E[std^2] + Var[mean])."""
    (m0, m1), (s0, s1) = mean_range, std_range
    mean = 0.5 * (m0 + m1)
    second = (s1**3 - s0**3) / (3 * (s1 - s0)) if s1 > s0 else s0**2
    return mean, math.sqrt(second + (m1 - m0) ** 2 / 12)


def build(
    name: str = "ccs",
    *,
    nz: int = 64,
    nr: int = 200,
    years: float = 30.0,
    rate: float = 0.36,
    pressure_steps: int = 120,
    porosity: float = 0.2,
    wells: tuple[int, ...] = (0, 50),
    noise_std: float = 0.04,
    mean_range: tuple[float, float] = (10.0, 500.0),
    std_range: tuple[float, float] = (1.0, 500.0),
    length_r_range: tuple[float, float] = (359.0, 35900.0),
    length_z_range: tuple[float, float] = (14.0, 56.0),
    fft_shape: tuple[int, int] = (128, 2048),
    transport: str = "impes",
) -> Task:
    checks.positive_ints(nz=nz, nr=nr, pressure_steps=pressure_steps)
    check_options(noise_std=noise_std, years=years, rate=rate)
    grid = co2.RadialGrid(nz, nr)
    config = co2.CO2Config(rate=rate, years=years, pressure_steps=pressure_steps, transport=transport)
    if not (0 < porosity <= 1):
        raise ValueError(f"porosity: expected a number in (0, 1], got {porosity!r}")
    prior = random_fields.AnisotropicLogNormal(
        grid.depths(),
        grid.centres(),
        mean_range=tuple(mean_range),
        std_range=tuple(std_range),
        length_z_range=tuple(length_z_range),
        length_x_range=tuple(length_r_range),
        fft_shape=tuple(fft_shape),
    )
    options = dict(
        nz=nz,
        nr=nr,
        years=years,
        rate=rate,
        pressure_steps=pressure_steps,
        porosity=porosity,
        wells=tuple(wells),
        noise_std=noise_std,
        mean_range=tuple(mean_range),
        std_range=tuple(std_range),
        length_r_range=tuple(length_r_range),
        length_z_range=tuple(length_z_range),
        fft_shape=tuple(fft_shape),
    )
    if transport != "impes":
        options["transport"] = transport
    return Task(
        name=name,
        grid=grid,
        prior=prior,
        physics=CCSPhysics(grid, config, float(porosity)),
        observation=ColumnObservation(grid.shape, list(wells)),
        noise=GaussianNoise(noise_std),
        field_stats=lognormal_stats(mean_range, std_range),
        config=tuple(sorted(options.items())),
        channels=(Channel("horizontal permeability", "mD"),),
    )


register("ccs", functools.partial(build, "ccs"))
