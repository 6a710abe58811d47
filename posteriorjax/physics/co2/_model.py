"""The CO2 model's static description: units, the graded radial grid and its geometry, the
fluids and rock-fluid functions with injection and time stepping (`CO2Config`), the solution
type, and the two-point transmissibilities (the package docstring states the equations)."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks

MILLIDARCY = 9.869233e-16  # m^2
SECONDS_PER_YEAR = 365.25 * 86400.0
GRAVITY = 9.80665  # m/s^2
TRANSPORTS = ("impes", "implicit")


@dataclasses.dataclass(frozen=True)
class RadialGrid:
    """Static (r, z) grid: `nz` layers of equal thickness, `nr` geometrically graded radial cells.

    The radial widths are `first_cell * growth^i`, `growth` chosen so the last face reaches
    `outer_radius` (defaults: 3.8 m, growth 1.0347, the inner face of cell 50 at 493 m
    from the well axis, centre 503 m; the last cell ends at 100 km).
    """

    nz: int = 64
    nr: int = 200
    thickness: float = 135.0
    outer_radius: float = 1.0e5
    first_cell: float = 3.8
    well_radius: float = 0.1

    def __post_init__(self):
        for name in ("nz", "nr"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 2:
                raise ValueError(f"RadialGrid: {name} must be an integer >= 2, got {v!r}")
        for name in ("thickness", "outer_radius", "first_cell", "well_radius"):
            checks.positive(f"RadialGrid: {name}", getattr(self, name))
        if self.well_radius + self.nr * self.first_cell >= self.outer_radius:
            raise ValueError(
                f"RadialGrid: nr * first_cell = {self.nr * self.first_cell} does not fit below "
                f"outer_radius - well_radius = {self.outer_radius - self.well_radius} with growing cells"
            )

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nz, self.nr)

    @property
    def dz(self) -> float:
        return self.thickness / self.nz

    @functools.cached_property
    def growth(self) -> float:
        """Width ratio of neighbouring radial cells (bisection on the outer radius)."""
        span = self.outer_radius - self.well_radius
        lo, hi = 1.0 + 1e-12, 2.0
        while self.first_cell * (hi**self.nr - 1) / (hi - 1) < span:
            hi *= 2
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if self.first_cell * (mid**self.nr - 1) / (mid - 1) < span:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    def faces(self) -> np.ndarray:
        """Radial faces `(nr + 1,)` in m, from the well radius to the outer radius."""
        widths = self.first_cell * self.growth ** np.arange(self.nr)
        r = self.well_radius + np.concatenate([[0.0], np.cumsum(widths)])
        r[-1] = self.outer_radius
        return r

    def centres(self) -> np.ndarray:
        """Radial pressure nodes `(nr,)`: geometric means of the faces."""
        r = self.faces()
        return np.sqrt(r[:-1] * r[1:])

    def depths(self) -> np.ndarray:
        """Layer-centre depths `(nz,)` below the top, in m."""
        return (np.arange(self.nz) + 0.5) * self.dz

    def volumes(self) -> np.ndarray:
        """Bulk cell volumes `(nz, nr)` in m^3."""
        r = self.faces()
        return np.broadcast_to(np.pi * (r[1:] ** 2 - r[:-1] ** 2) * self.dz, self.shape).copy()


@dataclasses.dataclass(frozen=True)
class CO2Config:
    """Fluids, rock-fluid functions, injection and time stepping (static).

    Attributes:
      rate: injected CO2, Mt/year. years: injection time.
      rho_w, rho_g: densities (kg/m^3); mu_w, mu_g: viscosities (Pa s).
      swr, sgc: residual brine and critical CO2 saturations; nw, ng: Corey exponents.
      anisotropy: vertical / horizontal permeability ratio. gravity: m/s^2 (0 disables).
      pressure_steps: number of pressure solves (uniform in time).
      substeps: None for adaptive CFL-limited substeps (forward mode differentiable),
        or a static count per pressure step (reverse mode too; a count that violates
        the CFL bound is an error).
      cfl: safety factor of the adaptive substeps. max_substeps: cap per pressure step.
      transport: "impes" (explicit upwind substeps under the CFL bound, the reference
        solution) or "implicit" (sequential implicit: backward-Euler upwind transport
        solved by Newton, steps of the whole pressure step halved where Newton fails).
        With "implicit", `substeps` is None (adaptive halving) or a static count of
        implicit steps per pressure step (reverse mode too).
      newton_tol: largest saturation update at convergence (None: 1e-9 in float64,
        1e-4 in float32). newton_max_iter: Newton iterations per implicit step.
      max_halvings: how often an implicit step may be halved within a pressure step.
      max_change: Appleyard chop, the largest saturation change of one Newton update.
    """

    rate: float = 0.36
    years: float = 30.0
    rho_w: float = 1020.0
    rho_g: float = 700.0
    mu_w: float = 5.0e-4
    mu_g: float = 6.0e-5
    swr: float = 0.2
    sgc: float = 0.05
    nw: float = 2.0
    ng: float = 2.0
    anisotropy: float = 1.0
    gravity: float = GRAVITY
    pressure_steps: int = 120
    substeps: int | None = None
    cfl: float = 0.9
    max_substeps: int = 20000
    transport: str = "impes"
    newton_tol: float | None = None
    newton_max_iter: int = 30
    max_halvings: int = 10
    max_change: float = 0.2

    def __post_init__(self):
        for name in ("rate", "years", "rho_w", "rho_g", "mu_w", "mu_g", "nw", "ng", "anisotropy", "cfl"):
            checks.positive(name, getattr(self, name))
        if not (0 <= self.gravity < math.inf):
            raise ValueError(f"gravity: expected a finite number >= 0, got {self.gravity!r}")
        if self.rho_g > self.rho_w:
            raise ValueError(f"rho_g: expected at most rho_w={self.rho_w}, got {self.rho_g}")
        if not (0 <= self.swr < 1 and 0 <= self.sgc < 1 and self.swr + self.sgc < 1):
            raise ValueError(
                f"swr, sgc: expected 0 <= swr, sgc and swr + sgc < 1, got {self.swr}, {self.sgc}"
            )
        if self.cfl > 1:
            raise ValueError(f"cfl: expected a safety factor in (0, 1], got {self.cfl}")
        checks.in_choices("transport", self.transport, TRANSPORTS)
        if self.newton_tol is not None:
            checks.positive("newton_tol", self.newton_tol)
        if not (isinstance(self.max_change, (int, float)) and 0 < self.max_change <= 1):
            raise ValueError(f"max_change: expected a number in (0, 1], got {self.max_change!r}")
        if (
            isinstance(self.max_halvings, bool)
            or not isinstance(self.max_halvings, int)
            or not (0 <= self.max_halvings <= 30)
        ):
            raise ValueError(f"max_halvings: expected an integer in [0, 30], got {self.max_halvings!r}")
        for name in ("pressure_steps", "max_substeps", "newton_max_iter"):
            checks.positive_int(name, getattr(self, name))
        if self.substeps is not None:
            checks.positive_int("substeps", self.substeps)

    @property
    def volume_rate(self) -> float:
        """Injected CO2 volume rate at reservoir density, m^3/s."""
        return self.rate * 1e9 / SECONDS_PER_YEAR / self.rho_g

    @property
    def duration(self) -> float:
        return self.years * SECONDS_PER_YEAR

    # -- rock-fluid functions ------------------------------------------------
    def mobilities(self, s):
        """(lam_w, lam_g) of CO2 saturation `s` (any shape), 1/(Pa s)."""
        sw = jnp.clip((1.0 - s - self.swr) / (1.0 - self.swr), 0.0, 1.0)
        sg = jnp.clip((s - self.sgc) / (1.0 - self.swr - self.sgc), 0.0, 1.0)
        return sw**self.nw / self.mu_w, sg**self.ng / self.mu_g

    def fractional_flow(self, s):
        lw, lg = self.mobilities(s)
        return lg / (lw + lg)

    def derivative_bounds(self) -> tuple[float, float]:
        """(max f', max(|lam_w'|, lam_g')) on [0, 1 - swr], for the CFL bound."""
        s = np.linspace(0.0, 1.0 - self.swr, 20001)
        sw = np.clip((1.0 - s - self.swr) / (1.0 - self.swr), 0.0, 1.0)
        sg = np.clip((s - self.sgc) / (1.0 - self.swr - self.sgc), 0.0, 1.0)
        lw, lg = sw**self.nw / self.mu_w, sg**self.ng / self.mu_g
        f = lg / (lw + lg)
        fmax = float(np.max(np.abs(np.diff(f)) / np.diff(s)))
        dlw = self.nw / (self.mu_w * (1.0 - self.swr)) if self.nw >= 1 else np.inf
        dlg = self.ng / (self.mu_g * (1.0 - self.swr - self.sgc)) if self.ng >= 1 else np.inf
        return 1.02 * fmax, max(dlw, dlg)


class CO2Solution(NamedTuple):
    """saturation `(nz, nr)`; pressure: buildup Phi = p - rho_w g z at the last solve, Pa;
    substeps: int `(pressure_steps,)` saturation substeps (explicit or implicit) taken per
    pressure step; newton_iterations: int `(pressure_steps,)` (zero for IMPES)."""

    saturation: jax.Array
    pressure: jax.Array
    substeps: jax.Array
    newton_iterations: jax.Array


# ----------------------------------------------------------------------------
# Geometry and transmissibilities


class _Geometry(NamedTuple):
    a_in: np.ndarray  # ln(r_{i+1} / rc_i), (nr - 1,)
    a_out: np.ndarray  # ln(rc_{i+1} / r_{i+1}), (nr - 1,)
    a_outer: float  # ln(R / rc_{nr-1})
    area: np.ndarray  # pi (r_{i+1}^2 - r_i^2), (nr,)
    volume: np.ndarray  # (nz, nr)


def _geometry(grid: RadialGrid) -> _Geometry:
    r, rc = grid.faces(), grid.centres()
    return _Geometry(
        np.log(r[1:-1] / rc[:-1]),
        np.log(rc[1:] / r[1:-1]),
        float(np.log(r[-1] / rc[-1])),
        np.pi * (r[1:] ** 2 - r[:-1] ** 2),
        grid.volumes(),
    )


def transmissibilities(perm, grid: RadialGrid, anisotropy: float = 1.0):
    """Geometric transmissibilities (m^3) of a permeability `perm (nz, nr)` in m^2.

    Returns `(t_r (nz, nr-1), t_out (nz,), t_z (nz-1, nr))`: radial faces, the outer
    constant-pressure face, vertical faces.
    """
    geo = _geometry(grid)
    dz = grid.dz
    dt = perm.dtype
    t_r = (
        2 * np.pi * dz / (jnp.asarray(geo.a_in, dt) / perm[:, :-1] + jnp.asarray(geo.a_out, dt) / perm[:, 1:])
    )
    t_out = 2 * np.pi * dz * perm[:, -1] / geo.a_outer
    kv = anisotropy * perm
    t_z = jnp.asarray(geo.area, dt) * 2 * kv[:-1] * kv[1:] / (dz * (kv[:-1] + kv[1:]))
    return t_r, t_out, t_z
