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

Modules: `_model` (grid, fluids, geometry and transmissibilities), `_pressure` (the pressure solve
and a pressure step's fluxes), `_transport` (IMPES substeps and the implicit transport); this
package module runs them (`simulate`) and holds the public API.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.physics import linear
from posteriorjax.physics.co2._model import (  # noqa: F401  (the model's constants, importable as before)
    GRAVITY,
    MILLIDARCY,
    SECONDS_PER_YEAR,
    TRANSPORTS,
    CO2Config,
    CO2Solution,
    RadialGrid,
    _geometry,
    transmissibilities,
)
from posteriorjax.physics.co2._pressure import (  # noqa: F401  (the factorization: tested and documented as co2.*)
    REFINEMENTS,
    _block_factor,
    _face_mean,
    _mmatrix_inverse,
    _net_outflow,
    _pressure_step,
)
from posteriorjax.physics.co2._transport import _cfl_limit, _implicit_transport, _substep

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
