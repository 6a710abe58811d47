"""The saturation transport of one pressure step, its total fluxes frozen: explicit upwind IMPES
substeps under the CFL bound (`_substep`, `_cfl_limit`), or sequential-implicit backward-Euler
steps solved by Newton (`_implicit_transport`; derivatives by the implicit function theorem)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from posteriorjax import checks
from posteriorjax.physics.co2._model import CO2Config

# ----------------------------------------------------------------------------
# Explicit upwind substeps (IMPES)


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
