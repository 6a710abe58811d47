"""CO2 injection into a radially symmetric saline aquifer: two-phase IMPES (or sequential
implicit) on an (r, z) grid.

Model. Two immiscible, incompressible phases, brine (w) and CO2 (g), in a horizontal
aquifer of thickness H with no-flow top and bottom, a constant-pressure (hydrostatic)
outer boundary at r = R, and a vertical well of radius r_w injecting a constant CO2
mass rate over the full thickness. With Phi = p - rho_w g z the brine potential
(z depth, downward) and Delta rho = rho_w - rho_g > 0,

    u_w = -K lam_w grad Phi,   u_g = -K lam_g (grad Phi + Delta rho g e_z),
    phi dS/dt + div u_g = q_g,   div(u_w + u_g) = q,   S = S_g = 1 - S_w,

lam_a = k_ra(S) / mu_a with Corey relative permeabilities
k_rw = ((1 - S - S_wr) / (1 - S_wr))^n_w and k_rg = ((S - S_gc) / (1 - S_wr - S_gc))^n_g
(clipped to [0, 1]), no capillary pressure. Densities and viscosities are constant.

Discretization (finite volumes, two-point fluxes). Cells `(nz, nr)` indexed [k, i]
(k = 0 at the top); radial faces r_0 = r_w < r_1 < ... < r_nr = R with geometrically
growing widths, pressure nodes at rc_i = sqrt(r_i r_{i+1}). Radial transmissibility
2 pi dz / (ln(r_{i+1}/rc_i) / K_i + ln(rc_{i+1}/r_{i+1}) / K_{i+1}) (exact for steady
radial flow in piecewise-constant K), vertical pi (r_{i+1}^2 - r_i^2) / dz with harmonic K.

IMPES. Every pressure step solves the SPD system

    sum_faces T lam_t,f (Phi_c - Phi_n) = q_c + gravity terms   (face mobilities: averages)

exactly by a block-tridiagonal (block Thomas, dense `nz x nz` Cholesky blocks along
r) elimination inside `jax.lax.custom_linear_solve`, so derivatives are implicit. The
face total fluxes v (divergence-consistent with the sources) are then frozen for
explicit upwind saturation substeps with hybrid upwinding (viscous part upwinded by
the total flux, gravity part lam_g(S_below) lam_w(S_above) / (lam_g + lam_w) upwinded
by phase):

    F_g = f(S_up) v - h G,   G = T_z Delta rho g dz,   S += dt (q_g - div F_g) / (phi V).

The substep obeys the CFL bound dt <= phi V / (f'_max sum_out v + h'_max sum |G|),
fixed per pressure step because v is. The injected CO2 (rate Q / rho_g, split over
the well's cells in proportion to K lam_t, the allocation of a well with depth-uniform
pressure) enters column 0; CO2 mass is conserved to rounding.

Sequential implicit (`CO2Config.transport="implicit"`). With the same frozen total
fluxes, the saturation takes backward-Euler steps of the same upwind fluxes,

    R(S) = phi V (S - S_old) / dt + div F_g(S) - q_g = 0,

solved by Newton (exact Jacobian from the face fluxes' partial derivatives; each update
chopped to |dS| <= 0.2 and projected onto [0, 1 - S_wr]). The Jacobian of the monotone
scheme is an M-matrix; its linear systems are solved by symmetric block Gauss-Seidel
sweeps over the radial columns, each column's vertical tridiagonal block exactly (one
sweep is exact where the radial flux is outward). One step covers the whole pressure
step; a step whose Newton fails is halved (`max_halvings`). The converged step is
written back in flux form, so CO2 mass stays conserved to rounding. Derivatives through
the Newton solves follow the implicit function theorem (`_implicit_root`, a custom JVP
whose linear solve is a transposable `custom_linear_solve`). The IMPES substeps remain
the reference solution (`transport="impes"`, the default).

Time loop: one `lax.scan` over pressure steps (each step `jax.checkpoint`-ed, so reverse
mode stores one saturation per pressure step plus one step's substeps); inside, either
an adaptive CFL-limited substep count (`lax.while_loop`: forward mode only) or a static
count `substeps` checked against the CFL bound (`lax.scan`: forward and reverse mode).

Units: SI inside; permeability in millidarcy (mD) at the interface; rates in Mt/year.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.physics import linear

MILLIDARCY = 9.869233e-16  # m^2
SECONDS_PER_YEAR = 365.25 * 86400.0
GRAVITY = 9.80665  # m/s^2
TRANSPORTS = ("impes", "implicit")
REFINEMENTS = 1  # steps of iterative refinement of each pressure solve (in the working precision)


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
# Geometry and the pressure system


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


def _mmatrix_inverse(off, g):
    """Inverse `(n, n)` of the symmetric M-matrix with off-diagonal part `off` (<= 0, zero diagonal)
    and row sums `g` (>= 0), by Gaussian elimination that never forms a difference.

    The GTH form of elimination (Grassmann, Taksar & Heyman 1985; for M-matrices given by their
    off-diagonal entries and row sums, O'Cinneide 1993, Alfa, Xue & Ye 2002): each pivot is the
    remaining row sum plus the magnitudes of the remaining off-diagonal entries, d_k = g_k -
    sum_{j>k} off_kj, each update adds quantities of one sign (off_jl -= off_jk off_kl / d_k, g_j
    -= off_jk g_k / d_k), and S = L D L^T with unit lower L <= 0 off the diagonal, so L^-1 >= 0 and
    S^-1 = L^-T D^-1 L^-1 are sums of non-negative terms: every entry to high relative accuracy
    however small the row sums are next to the diagonal. (A Cholesky factorization of the same
    matrix in float32 breaks down once the diagonal dominance falls below about 1e-7 relative.)
    """
    n = off.shape[0]
    idx = jnp.arange(n)
    offdiag = 1.0 - jnp.eye(n, dtype=off.dtype)

    def step(k, carry):
        off, g, low, d = carry
        row = jnp.where(idx > k, off[k], 0.0)  # off_kj, j > k (<= 0)
        dk = g[k] - jnp.sum(row)
        off = (off - jnp.outer(row, row) / dk) * offdiag
        g = g - row * (g[k] / dk)
        return off, g, low.at[:, k].set(row / dk), d.at[k].set(dk)

    init = (off * offdiag, g, jnp.zeros_like(off), jnp.zeros_like(g))
    _, _, low, d = jax.lax.fori_loop(0, n, step, init)
    eye = jnp.eye(n, dtype=off.dtype)
    m = jax.scipy.linalg.solve_triangular(low + eye, eye, lower=True, unit_diagonal=True)  # >= 0
    return (m.T / d) @ m


def _block_factor(off_z, off_r, c_out):
    """Inverse Schur complements `(nr, nz, nz)` of the block-tridiagonal pressure matrix.

    Block i is tridiag(off_z[:, i], ., off_z[:, i]) with its diagonal set by the row sums; blocks
    i, i+1 couple through diag(off_r[:, i]) (`off_*` <= 0, minus the face conductances). The
    matrix is a graph Laplacian of the conductances plus `c_out` on the last column (the outer
    Dirichlet face), so eliminating columns 0 .. i-1 leaves a Laplacian (Kron reduction) whose
    block i has row sums -off_r[:, i] (c_out for the last block): the Schur complement
    S_i = B_i - C W_{i-1} C is formed from its off-diagonal part, which has no cancellation, and
    these row sums, and inverted by `_mmatrix_inverse`. The row sums are the radial conductances,
    up to 1e8 times smaller than the vertical ones on the outer cells of coarse grids, so the
    usual diagonal B_i - (C W C)_kk is lost to rounding in float32 there.
    """
    grounded = jnp.concatenate([-off_r, c_out[:, None]], axis=1)  # (nz, nr) row sums of S_i

    def block_off(i):
        e = jnp.diag(off_z[:, i], 1)
        return e + e.T

    def step(w_prev, i):
        c = off_r[:, i - 1]
        w = _mmatrix_inverse(block_off(i) - c[:, None] * w_prev * c[None, :], grounded[:, i])
        return w, w

    w0 = _mmatrix_inverse(block_off(0), grounded[:, 0])
    _, ws = jax.lax.scan(step, w0, jnp.arange(1, off_r.shape[1] + 1))
    return jnp.concatenate([w0[None], ws], axis=0)


def _block_solve(w, off_r, b):
    """Solve with the factor from `_block_factor` (forward elimination, back substitution)."""

    def fwd(y_prev, inputs):
        wi_prev, c, bi = inputs
        y = bi - c * (wi_prev @ y_prev)
        return y, y

    y0 = b[:, 0]
    _, ys = jax.lax.scan(fwd, y0, (w[:-1], off_r.T, b[:, 1:].T))
    y = jnp.concatenate([y0[None], ys], axis=0)  # (nr, nz)

    def bwd(x_next, inputs):
        wi, c, yi = inputs
        x = wi @ (yi - c * x_next)
        return x, x

    x_last = w[-1] @ y[-1]
    _, xs = jax.lax.scan(bwd, x_last, (w[:-1], off_r.T, y[:-1]), reverse=True)
    return jnp.concatenate([xs, x_last[None]], axis=0).T


def _pressure_operator(c_r, c_out, c_z):
    """Matrix-free `Phi -> A Phi` with face conductances c_r, c_z and the outer Dirichlet c_out."""

    def matvec(p):
        fr = c_r * (p[:, :-1] - p[:, 1:])
        fz = c_z * (p[:-1] - p[1:])
        out = jnp.pad(fr, ((0, 0), (0, 1))) - jnp.pad(fr, ((0, 0), (1, 0)))
        out = out + jnp.pad(fz, ((0, 1), (0, 0))) - jnp.pad(fz, ((1, 0), (0, 0)))
        return out.at[:, -1].add(c_out * p[:, -1])

    return matvec


def _solve_pressure(c_r, c_out, c_z, rhs):
    """Phi solving the SPD pressure system exactly; implicit derivatives."""
    matvec = _pressure_operator(c_r, c_out, c_z)
    factor = jax.lax.stop_gradient(_block_factor(-c_z, -c_r, c_out))
    off_r = jax.lax.stop_gradient(-c_r)

    def solve(_, b):
        x = _block_solve(factor, off_r, b)
        for _ in range(REFINEMENTS):
            x = x + _block_solve(factor, off_r, b - matvec(x))
        return x

    return jax.lax.custom_linear_solve(matvec, rhs, solve, symmetric=True)


# ----------------------------------------------------------------------------
# One pressure step and its saturation substeps


def _face_mean(a, axis):
    if axis == 0:
        return 0.5 * (a[:-1] + a[1:])
    return 0.5 * (a[:, :-1] + a[:, 1:])


def _pressure_step(s, perm, t, cfg: CO2Config, dz: float):
    """Total face fluxes, well sources and the CFL limit for saturation `s`."""
    t_r, t_out, t_z = t
    lw, lg = cfg.mobilities(s)
    lt = lw + lg
    grav = t_z * ((cfg.rho_w - cfg.rho_g) * cfg.gravity * dz)  # G of each vertical face
    c_r = t_r * _face_mean(lt, 1)
    c_z = t_z * _face_mean(lt, 0)
    c_out = t_out * lt[:, -1]
    lg_z = _face_mean(lg, 0)
    well = perm[:, 0] * lt[:, 0]
    q = cfg.volume_rate * well / jnp.sum(well)
    rhs = jnp.zeros_like(s).at[:, 0].add(q)
    gz = lg_z * grav
    rhs = rhs + jnp.pad(gz, ((0, 1), (0, 0))) - jnp.pad(gz, ((1, 0), (0, 0)))
    phi = _solve_pressure(c_r, c_out, c_z, rhs)
    v_r = c_r * (phi[:, :-1] - phi[:, 1:])
    v_z = c_z * (phi[:-1] - phi[1:]) - gz
    v_out = c_out * phi[:, -1]
    # Close the discrete mass balance exactly (rounding of the solve, largest in float32):
    # cell (k, i)'s imbalance is moved to its outer radial face, cumulatively, ending at
    # the far boundary; the transport then sees divergence-consistent fluxes.
    imbalance = _net_outflow(v_r, v_z, v_out) - jnp.zeros_like(s).at[:, 0].add(q)
    carried = jnp.cumsum(imbalance, axis=1)
    v_r = v_r - carried[:, :-1]
    v_out = v_out - carried[:, -1]
    return phi, v_r, v_z, v_out, q, grav


def _net_outflow(v_r, v_z, v_out):
    out = jnp.pad(v_r, ((0, 0), (0, 1))) - jnp.pad(v_r, ((0, 0), (1, 0)))
    out = out + jnp.pad(v_z, ((0, 1), (0, 0))) - jnp.pad(v_z, ((1, 0), (0, 0)))
    return out.at[:, -1].add(v_out)


def _cfl_limit(v_r, v_z, v_out, grav, pore_volume, bounds):
    fmax, hmax = bounds
    pos = lambda a: jnp.maximum(a, 0.0)  # noqa: E731
    out = jnp.pad(pos(v_r), ((0, 0), (0, 1))) + jnp.pad(pos(-v_r), ((0, 0), (1, 0)))
    out = out + jnp.pad(pos(v_z), ((0, 1), (0, 0))) + jnp.pad(pos(-v_z), ((1, 0), (0, 0)))
    out = out.at[:, -1].add(pos(v_out))
    g = jnp.pad(grav, ((0, 1), (0, 0))) + jnp.pad(grav, ((1, 0), (0, 0)))
    rate = fmax * out + hmax * g
    return jnp.min(pore_volume / jnp.maximum(rate, 1e-300 if pore_volume.dtype == jnp.float64 else 1e-30))


def _substep(s, dt, *, v_r, v_z, v_out, q, grav, pore_volume, cfg: CO2Config):
    """Explicit upwind update of the CO2 saturation over `dt` with frozen total fluxes."""
    f = cfg.fractional_flow
    lw, lg = cfg.mobilities(s)
    f_r = f(jnp.where(v_r > 0, s[:, :-1], s[:, 1:])) * v_r
    lg_below, lw_above = lg[1:], lw[:-1]
    den = lg_below + lw_above
    safe = jnp.where(den > 0, den, 1.0)
    h = jnp.where(den > 0, lg_below * lw_above / safe, 0.0)
    f_z = f(jnp.where(v_z > 0, s[:-1], s[1:])) * v_z - h * grav
    out = jnp.pad(f_r, ((0, 0), (0, 1))) - jnp.pad(f_r, ((0, 0), (1, 0)))
    out = out + jnp.pad(f_z, ((0, 1), (0, 0))) - jnp.pad(f_z, ((1, 0), (0, 0)))
    out = out.at[:, -1].add(f(s[:, -1]) * jnp.maximum(v_out, 0.0))
    out = out.at[:, 0].add(-q)
    return s - dt * out / pore_volume


# ----------------------------------------------------------------------------
# Sequential-implicit saturation: backward Euler with Newton on the upwind transport


def _face_fluxes(s, v_r, v_z, v_out, grav, cfg: CO2Config):
    """CO2 face fluxes of `_substep` as functions of the two cells each face joins.

    Returns (F_r(s_a, s_b), F_z(s_top, s_bottom), F_out(s_last)) with s_a = s[:, :-1],
    s_b = s[:, 1:]; positive F goes outward (radial) or downward (vertical).
    """
    f = cfg.fractional_flow

    def f_r(a, b):
        return f(jnp.where(v_r > 0, a, b)) * v_r

    def f_z(top, bottom):
        lg_below = cfg.mobilities(bottom)[1]
        lw_above = cfg.mobilities(top)[0]
        den = lg_below + lw_above
        h = jnp.where(den > 0, lg_below * lw_above / jnp.where(den > 0, den, 1.0), 0.0)
        return f(jnp.where(v_z > 0, top, bottom)) * v_z - h * grav

    def f_out(last):
        return f(last) * jnp.maximum(v_out, 0.0)

    return f_r, f_z, f_out


def _transport_residual(s, p, cfg: CO2Config):
    """Backward-Euler residual (m^3/s) of the CO2 balance at the new saturation `s`.

    p = (s_old, dt, v_r, v_z, v_out, q, grav, pore_volume):
    R = pore_volume (s - s_old) / dt + div F_g(s) - q_g, zero at the implicit step.
    """
    s_old, dt, v_r, v_z, v_out, q, grav, pore_volume = p
    f_r, f_z, f_out = _face_fluxes(s, v_r, v_z, v_out, grav, cfg)
    fr = f_r(s[:, :-1], s[:, 1:])
    fz = f_z(s[:-1], s[1:])
    out = jnp.pad(fr, ((0, 0), (0, 1))) - jnp.pad(fr, ((0, 0), (1, 0)))
    out = out + jnp.pad(fz, ((0, 1), (0, 0))) - jnp.pad(fz, ((1, 0), (0, 0)))
    out = out.at[:, -1].add(f_out(s[:, -1]))
    out = out.at[:, 0].add(-q)
    return pore_volume * (s - s_old) / dt + out


class _Jacobian(NamedTuple):
    """dR/ds of `_transport_residual`: a 5-point matrix, block-tridiagonal along r.

    Block i (the column of cells [:, i]) is tridiagonal: `diag (nz, nr)`, `upper_z[k, i]`
    = dR[k, i]/ds[k+1, i], `lower_z[k, i]` = dR[k+1, i]/ds[k, i] (both (nz-1, nr)); blocks
    i, i+1 couple through diagonals `upper_r[:, i]` = dR[:, i]/ds[:, i+1] and
    `lower_r[:, i]` = dR[:, i+1]/ds[:, i] (both (nz, nr-1)).
    """

    diag: jax.Array
    upper_z: jax.Array
    lower_z: jax.Array
    upper_r: jax.Array
    lower_r: jax.Array

    def transpose(self) -> _Jacobian:
        return _Jacobian(self.diag, self.lower_z, self.upper_z, self.lower_r, self.upper_r)


def _transport_jacobian(s, p, cfg: CO2Config) -> _Jacobian:
    """The exact Jacobian of `_transport_residual` from the face fluxes' partial derivatives."""
    s_old, dt, v_r, v_z, v_out, q, grav, pore_volume = p
    f_r, f_z, f_out = _face_fluxes(s, v_r, v_z, v_out, grav, cfg)

    def partials(fn, a, b):
        da = jax.jvp(lambda x: fn(x, b), (a,), (jnp.ones_like(a),))[1]
        db = jax.jvp(lambda x: fn(a, x), (b,), (jnp.ones_like(b),))[1]
        return da, db

    dr_a, dr_b = partials(f_r, s[:, :-1], s[:, 1:])
    dz_t, dz_b = partials(f_z, s[:-1], s[1:])
    d_out = jax.jvp(f_out, (s[:, -1],), (jnp.ones_like(s[:, -1]),))[1]
    diag = jnp.broadcast_to(pore_volume / dt, s.shape)
    diag = diag + jnp.pad(dr_a, ((0, 0), (0, 1))) - jnp.pad(dr_b, ((0, 0), (1, 0)))
    diag = diag + jnp.pad(dz_t, ((0, 1), (0, 0))) - jnp.pad(dz_b, ((1, 0), (0, 0)))
    diag = diag.at[:, -1].add(d_out)
    return _Jacobian(diag, dz_b, -dz_t, dr_b, -dr_a)


def _jacobian_matvec(jac: _Jacobian, x):
    """`jac @ x` for x `(nz, nr)`."""
    out = jac.diag * x
    out = (
        out + jnp.pad(jac.upper_z * x[1:], ((0, 1), (0, 0))) + jnp.pad(jac.lower_z * x[:-1], ((1, 0), (0, 0)))
    )
    return (
        out
        + jnp.pad(jac.upper_r * x[:, 1:], ((0, 0), (0, 1)))
        + jnp.pad(jac.lower_r * x[:, :-1], ((0, 0), (1, 0)))
    )


def _line_sweep(jac: _Jacobian, b, x, forward: bool):
    """One block Gauss-Seidel sweep over the radial columns (forward: outward, else inward).

    Column i solves its tridiagonal (vertical) block exactly with the newest values of
    the neighbouring columns. For outward total flux everywhere the upwind Jacobian is
    block lower triangular and one forward sweep is the exact solve.
    """
    dl = jnp.pad(jac.lower_z, ((1, 0), (0, 0))).T  # (nr, nz)
    du = jnp.pad(jac.upper_z, ((0, 1), (0, 0))).T
    d = jac.diag.T
    lower, upper, bt, xt = jac.lower_r.T, jac.upper_r.T, b.T, x.T  # (nr - 1, nz), (nr, nz)

    def solve(dl_i, d_i, du_i, r):
        return jax.lax.linalg.tridiagonal_solve(dl_i, d_i, du_i, r[:, None])[:, 0]

    if forward:
        known = bt - jnp.pad(upper * xt[1:], ((0, 1), (0, 0)))
        couple = jnp.pad(lower, ((1, 0), (0, 0)))
    else:
        known = bt - jnp.pad(lower * xt[:-1], ((1, 0), (0, 0)))
        couple = jnp.pad(upper, ((0, 1), (0, 0)))

    def step(neighbour, inputs):
        dl_i, d_i, du_i, k_i, c_i = inputs
        x_i = solve(dl_i, d_i, du_i, k_i - c_i * neighbour)
        return x_i, x_i

    _, xs = jax.lax.scan(step, jnp.zeros_like(d[0]), (dl, d, du, known, couple), reverse=not forward)
    return xs.T


def _jacobian_solve(jac: _Jacobian, b, rtol: float, max_sweeps: int = 60):
    """x with ||jac x - b||_inf <= rtol ||b||_inf by symmetric block Gauss-Seidel sweeps.

    The Jacobian is an M-matrix, so the splitting into its block lower (upper) triangle
    is regular and the sweeps converge; with one-signed radial flux they are exact in one.
    """
    scale = jnp.max(jnp.abs(b))

    def residual(x):
        return jnp.max(jnp.abs(_jacobian_matvec(jac, x) - b))

    def body(carry):
        x, _, it = carry
        x = _line_sweep(jac, b, _line_sweep(jac, b, x, True), False)
        return x, residual(x), it + 1

    def cond(carry):
        _, r, it = carry
        return (it < max_sweeps) & (r > rtol * scale)

    x0 = jnp.zeros_like(b)
    x, _, _ = jax.lax.while_loop(cond, body, (x0, residual(x0), jnp.asarray(0)))
    return x


def _newton_tolerance(cfg: CO2Config, dtype) -> float:
    if cfg.newton_tol is not None:
        return cfg.newton_tol
    return 1e-9 if dtype == jnp.float64 else 1e-4


def _newton(s0, p, cfg: CO2Config):
    """Newton on `_transport_residual` from `s0` (no derivatives): (s, converged, iterations).

    Each update is chopped to |ds| <= `cfg.max_change` per cell (Appleyard) and projected
    onto [0, 1 - swr]; converged when the largest unchopped update is below the tolerance.
    """
    tol = _newton_tolerance(cfg, s0.dtype)
    upper = 1.0 - cfg.swr

    def body(carry):
        s, _, it = carry
        jac = _transport_jacobian(s, p, cfg)
        ds = -_jacobian_solve(jac, _transport_residual(s, p, cfg), 1e-4 if s.dtype == jnp.float32 else 1e-8)
        step = jnp.max(jnp.abs(ds))
        ds = jnp.clip(ds, -cfg.max_change, cfg.max_change)
        return jnp.clip(s + ds, 0.0, upper), step, it + 1

    def cond(carry):
        _, step, it = carry
        return (it < cfg.newton_max_iter) & ~(step <= tol)

    s, step, it = jax.lax.while_loop(cond, body, (s0, jnp.asarray(jnp.inf, s0.dtype), jnp.asarray(0)))
    return s, step <= tol, it


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _implicit_root(s_star, p, cfg: CO2Config):
    """`s_star` (a converged root of R(., p)) with the implicit-function-theorem tangent.

    ds*/dp . dp = -(dR/ds)^-1 (dR/dp . dp) at s_star; the solve is a
    `custom_linear_solve` with the transposed block LU, so reverse mode works too.
    """
    return s_star


@_implicit_root.defjvp
def _implicit_root_jvp(cfg, primals, tangents):
    s_star, p = primals
    _, dp = tangents
    s_star = jax.lax.stop_gradient(s_star)
    dr = jax.jvp(lambda q: _transport_residual(s_star, q, cfg), (p,), (dp,))[1]
    jac = jax.lax.stop_gradient(_transport_jacobian(s_star, p, cfg))

    def matvec(x):
        return jax.jvp(lambda s: _transport_residual(s, jax.lax.stop_gradient(p), cfg), (s_star,), (x,))[1]

    rtol = 1e-6 if s_star.dtype == jnp.float32 else 1e-13

    def solve(_, b):
        return _jacobian_solve(jac, b, rtol)

    def transpose_solve(_, b):
        return _jacobian_solve(jac.transpose(), b, rtol)

    ds = jax.lax.custom_linear_solve(matvec, -dr, solve, transpose_solve)
    return s_star, ds


def _implicit_step(s, dt, *, v_r, v_z, v_out, q, grav, pore_volume, cfg: CO2Config):
    """One backward-Euler transport step: (s_new, converged, Newton iterations).

    Starts Newton from `s`; the new saturation is then written in flux form,
    s_new = s + dt (q_g - div F_g(s*)) / pore_volume with the fluxes at the root s*,
    so CO2 mass is conserved to rounding whatever the Newton tolerance.
    """
    p = (s, dt, v_r, v_z, v_out, q, grav, pore_volume)
    root, ok, it = _newton(jax.lax.stop_gradient(s), jax.lax.stop_gradient(p), cfg)
    root = _implicit_root(root, p, cfg)
    flux = _transport_residual(root, p, cfg) - pore_volume * (root - s) / dt  # div F_g(s*) - q_g
    return s - dt * flux / pore_volume, ok, it


def _implicit_transport(s, dt_p, fluxes, pore_volume, cfg: CO2Config):
    """Advance `s` over one pressure step of `dt_p` seconds with implicit steps.

    Adaptive (`cfg.substeps is None`): steps of dt_p / 2^level, starting at level 0;
    a step whose Newton does not converge is retried at half the size, and after a
    success the size doubles again where the position allows; more than
    `cfg.max_halvings` halvings is an error. Static (`cfg.substeps = n`): n equal steps,
    each of which must converge. Returns (s, steps taken, Newton iterations).
    """
    v_r, v_z, v_out, q, grav = fluxes
    step = functools.partial(
        _implicit_step, v_r=v_r, v_z=v_z, v_out=v_out, q=q, grav=grav, pore_volume=pore_volume, cfg=cfg
    )
    if cfg.substeps is not None:

        def body(carry, _):
            s, ok_all, iters = carry
            s, ok, it = step(s, dt_p / cfg.substeps)
            return (s, ok_all & ok, iters + it), None

        (s, ok, iters), _ = jax.lax.scan(
            body, (s, jnp.asarray(True), jnp.asarray(0)), None, length=cfg.substeps
        )
        s = checks.error_if(
            s,
            ~ok,
            f"Newton: an implicit saturation step did not converge in newton_max_iter={cfg.newton_max_iter} "
            "iterations; use more substeps or pressure_steps, or substeps=None (adaptive)",
        )
        return s, jnp.asarray(cfg.substeps), iters

    top = cfg.max_halvings
    units = 2**top  # the pressure step in units of its smallest allowed implicit step

    def cond(carry):
        return carry[1] < units

    def body(carry):
        s, pos, level, steps, iters = carry
        size = jnp.left_shift(1, top - level)
        s_new, ok, it = step(s, dt_p * size.astype(s.dtype) / units)
        s = jnp.where(ok, s_new, s)
        pos = jnp.where(ok, pos + size, pos)
        coarser = (level > 0) & (pos % (2 * size) == 0)
        level = jnp.where(ok, jnp.where(coarser, level - 1, level), level + 1)
        level = checks.error_if(
            level,
            level > top,
            f"Newton: an implicit saturation step did not converge at {top} halvings of the pressure "
            "step (max_halvings); raise max_halvings, newton_max_iter or pressure_steps",
        )
        return s, pos, level, steps + ok.astype(jnp.int32), iters + it

    zero = jnp.asarray(0)
    s, _, _, steps, iters = jax.lax.while_loop(cond, body, (s, zero, zero, zero, zero))
    return s, steps, iters


# ----------------------------------------------------------------------------
# The run


def _check_inputs(perm, porosity, grid: RadialGrid):
    if not isinstance(grid, RadialGrid):
        raise TypeError(f"grid: expected a posteriorjax.physics.co2.RadialGrid, got {type(grid).__name__}")
    if tuple(jnp.shape(perm)) != grid.shape:
        raise ValueError(f"perm: expected shape {grid.shape} (nz, nr), got {jnp.shape(perm)}")
    if jnp.ndim(porosity) != 0 and tuple(jnp.shape(porosity)) != grid.shape:
        raise ValueError(f"porosity: expected a scalar or shape {grid.shape}, got {jnp.shape(porosity)}")
    if linear.is_concrete(perm):
        k = np.asarray(perm)
        bad = ~np.isfinite(k) | (k <= 0)
        if bad.any():
            raise ValueError(
                f"perm: expected positive, finite permeability (mD), got {int(bad.sum())} non-positive "
                f"or non-finite entries (min {np.nanmin(np.where(np.isfinite(k), k, np.nan)):.4g})"
            )
    if linear.is_concrete(porosity):
        p = np.asarray(porosity)
        bad = ~np.isfinite(p) | (p <= 0) | (p > 1)
        if bad.any():
            raise ValueError(
                f"porosity: expected values in (0, 1], got {int(bad.sum())} entries outside "
                f"(range {np.nanmin(p):.4g} .. {np.nanmax(p):.4g})"
            )


def _guard(perm, porosity):
    perm = checks.error_if(
        perm, ~jnp.all(jnp.isfinite(perm) & (perm > 0)), "perm: expected positive, finite permeability"
    )
    porosity = checks.error_if(
        porosity,
        ~jnp.all(jnp.isfinite(porosity) & (porosity > 0) & (porosity <= 1)),
        "porosity: expected values in (0, 1]",
    )
    return perm, porosity


@functools.partial(jax.jit, static_argnames=("grid", "config"))
def _simulate(perm_md, porosity, grid: RadialGrid, config: CO2Config) -> CO2Solution:
    cfg = config
    perm_md, porosity = _guard(perm_md, porosity)
    perm = perm_md * MILLIDARCY
    dtype = perm.dtype
    t = transmissibilities(perm, grid, cfg.anisotropy)
    pore_volume = jnp.broadcast_to(porosity, grid.shape).astype(dtype) * jnp.asarray(
        _geometry(grid).volume, dtype
    )
    bounds = cfg.derivative_bounds()
    dt_p = cfg.duration / cfg.pressure_steps

    def pressure_step(carry, _):
        s, _ = carry
        phi, v_r, v_z, v_out, q, grav = _pressure_step(s, perm, t, cfg, grid.dz)
        if cfg.transport == "implicit":
            s, n, iters = _implicit_transport(s, dt_p, (v_r, v_z, v_out, q, grav), pore_volume, cfg)
            return (s, phi), (n.astype(jnp.int32), iters.astype(jnp.int32))
        limit = _cfl_limit(v_r, v_z, v_out, grav, pore_volume, bounds)
        update = functools.partial(
            _substep, v_r=v_r, v_z=v_z, v_out=v_out, q=q, grav=grav, pore_volume=pore_volume, cfg=cfg
        )
        if cfg.substeps is None:
            n = jnp.maximum(jnp.ceil(dt_p / (cfg.cfl * limit)), 1.0)
            n = checks.error_if(
                n,
                n > cfg.max_substeps,
                f"CFL: a pressure step of {cfg.years / cfg.pressure_steps:.4g} years needs more than "
                f"max_substeps={cfg.max_substeps} saturation substeps; raise max_substeps or pressure_steps",
            )
            dt = dt_p / n
            s = jax.lax.fori_loop(0, n.astype(jnp.int32), lambda _, x: update(x, dt), s)
        else:
            n = jnp.asarray(cfg.substeps, dtype)
            dt = dt_p / cfg.substeps
            s = checks.error_if(
                s,
                dt > limit,
                f"substeps: {cfg.substeps} saturation substeps per pressure step violate the CFL bound; "
                "use more substeps or pressure_steps, or substeps=None (adaptive)",
            )
            s = jax.lax.scan(lambda x, _: (update(x, dt), None), s, None, length=cfg.substeps)[0]
        return (s, phi), (n.astype(jnp.int32), jnp.asarray(0, jnp.int32))

    s0 = jnp.zeros(grid.shape, dtype)
    (s, phi), (counts, iterations) = jax.lax.scan(
        jax.checkpoint(pressure_step), (s0, jnp.zeros_like(s0)), None, length=cfg.pressure_steps
    )
    s = checks.error_if(s, ~jnp.all(jnp.isfinite(s)), "saturation: the run produced non-finite values")
    return CO2Solution(s, phi, counts, iterations)


def simulate(perm, porosity=0.2, *, grid: RadialGrid = RadialGrid(), config: CO2Config = CO2Config()):
    """Run the injection; returns `CO2Solution(saturation, pressure, substeps)`.

    Args:
      perm: horizontal permeability `(nz, nr)` in mD, positive and finite (ValueError
        outside jit, `checks.error_if` inside); rows are layers from the top, columns radial cells.
      porosity: scalar or `(nz, nr)` in (0, 1].
      grid: `RadialGrid` (static). config: `CO2Config` (static).

    jit/vmap-able; forward-mode differentiable; reverse mode with `config.substeps` set
    (IMPES or implicit transport).
    """
    _check_inputs(perm, porosity, grid)
    dtype = linear.float_dtype(perm, porosity)
    return _simulate(jnp.asarray(perm, dtype), jnp.asarray(porosity, dtype), grid, config)


def solve(perm, porosity=0.2, *, grid: RadialGrid = RadialGrid(), config: CO2Config = CO2Config()):
    """CO2 saturation `(nz, nr)` after `config.years` of injection (see `simulate`)."""
    return simulate(perm, porosity, grid=grid, config=config).saturation


def pressure(perm, saturation, *, grid: RadialGrid = RadialGrid(), config: CO2Config = CO2Config()):
    """Overpressure Phi = p - rho_w g z `(nz, nr)`, Pa, of one pressure solve at `saturation`."""
    _check_inputs(perm, 0.5, grid)
    dtype = linear.float_dtype(perm, saturation)
    perm = jnp.asarray(perm, dtype) * MILLIDARCY
    t = transmissibilities(perm, grid, config.anisotropy)
    return _pressure_step(jnp.asarray(saturation, dtype), perm, t, config, grid.dz)[0]


def residual(perm, saturation, *, grid: RadialGrid = RadialGrid(), config: CO2Config = CO2Config()):
    """Residual `(nz, nr)` (m^3/s) of the IMPES pressure equation at `saturation`.

    ``A(K, S) Phi - b(K, S)`` with Phi from the block elimination (before the flux
    closure of `_pressure_step`): the accuracy of the linear solve.
    """
    _check_inputs(perm, 0.5, grid)
    dtype = linear.float_dtype(perm, saturation)
    perm = jnp.asarray(perm, dtype) * MILLIDARCY
    s = jnp.asarray(saturation, dtype)
    t = transmissibilities(perm, grid, config.anisotropy)
    t_r, t_out, t_z = t
    lw, lg = config.mobilities(s)
    lt = lw + lg
    c_r, c_z, c_out = t_r * _face_mean(lt, 1), t_z * _face_mean(lt, 0), t_out * lt[:, -1]
    phi, _, _, _, q, grav = _pressure_step(s, perm, t, config, grid.dz)
    v_r = c_r * (phi[:, :-1] - phi[:, 1:])
    v_z = c_z * (phi[:-1] - phi[1:]) - _face_mean(lg, 0) * grav
    return _net_outflow(v_r, v_z, c_out * phi[:, -1]).at[:, 0].add(-q)


def co2_mass(saturation, porosity=0.2, *, grid: RadialGrid = RadialGrid(), config: CO2Config = CO2Config()):
    """CO2 mass in place, kg: sum of porosity x saturation x rho_g x cell volume."""
    return config.rho_g * jnp.sum(
        porosity * saturation * jnp.asarray(grid.volumes(), jnp.result_type(saturation))
    )


__all__ = [
    "CO2Config",
    "CO2Solution",
    "MILLIDARCY",
    "RadialGrid",
    "co2_mass",
    "pressure",
    "residual",
    "simulate",
    "solve",
    "transmissibilities",
]
