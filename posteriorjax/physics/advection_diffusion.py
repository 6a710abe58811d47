"""Advection-diffusion ``u_t + b . grad u = kappa lap u + f`` on the square, ``u = 0`` on the boundary.

Discretization: interior nodes of a Dirichlet `Grid` (as `physics.darcy`); the
5-point Laplacian; first-order **upwind** differences for ``b . grad u`` (stable
and monotone at any Peclet number ``|b| L / kappa``; first-order accurate in h,
numerical diffusion ``|b| h / 2``); velocity `b (2, n, n)` = (b_x, b_y) at the nodes.

* `solve_transient`: IMEX Euler, implicit diffusion, explicit advection and source,

      (u^{k+1} - u^k) / dt = kappa lap_h u^{k+1} - (b . grad_h) u^k + f,

  the implicit part solved exactly in the sine basis (`linear.sine_diagonal_solve`).
  Stable for ``dt <= h / max(|b_x| + |b_y|)`` (checked). Steps run in a `lax.scan`;
  snapshots are returned at `num_frames` evenly spaced times ending at `t_final`.
* `solve_steady`: ``(kappa (-lap_h) + b . grad_h) u = f`` by GMRES preconditioned
  with the fast Poisson solve, inside ``jax.lax.custom_linear_solve`` so derivatives
  are implicit (one more GMRES solve with the transposed operator).

Shapes: one sample; `u`, `f` `(n, n)` indexed `[y, x]`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsl
import numpy as np

from posteriorjax.grids import Grid
from posteriorjax.physics import linear


def _check(grid: Grid, velocity, f) -> tuple[jnp.ndarray, jnp.ndarray]:
    linear.check_dirichlet(grid)
    velocity = jnp.asarray(velocity)
    if velocity.shape != (2, *grid.shape):
        raise ValueError(f"velocity: expected shape (2, {grid.n}, {grid.n}), got {velocity.shape}")
    if jnp.ndim(f) != 0:
        grid.check_field(f, "f")
    dtype = linear.float_dtype(velocity, f)
    return velocity.astype(dtype), jnp.broadcast_to(jnp.asarray(f, dtype), grid.shape)


def uniform_velocity(grid: Grid, bx: float, by: float, dtype=float) -> jnp.ndarray:
    """A constant velocity field `(2, n, n)`."""
    return jnp.stack([jnp.full(grid.shape, bx, dtype), jnp.full(grid.shape, by, dtype)])


def advection(u: jnp.ndarray, velocity: jnp.ndarray, grid: Grid) -> jnp.ndarray:
    """Upwind ``b . grad_h u`` `(n, n)` with u = 0 outside the grid."""
    h = grid.spacing
    up = jnp.pad(u, 1)
    dx_minus = (u - up[1:-1, :-2]) / h
    dx_plus = (up[1:-1, 2:] - u) / h
    dy_minus = (u - up[:-2, 1:-1]) / h
    dy_plus = (up[2:, 1:-1] - u) / h
    bx, by = velocity
    return jnp.where(bx > 0, bx * dx_minus, bx * dx_plus) + jnp.where(by > 0, by * dy_minus, by * dy_plus)


def laplacian(u: jnp.ndarray, grid: Grid) -> jnp.ndarray:
    """5-point ``lap_h u`` with u = 0 outside the grid."""
    up = jnp.pad(u, 1)
    return (up[:-2, 1:-1] + up[2:, 1:-1] + up[1:-1, :-2] + up[1:-1, 2:] - 4 * u) / grid.spacing**2


def stable_dt(velocity, grid: Grid) -> float:
    """The explicit-upwind limit ``h / max(|b_x| + |b_y|)`` (inf for b = 0)."""
    speed = float(np.max(np.abs(np.asarray(velocity[0])) + np.abs(np.asarray(velocity[1]))))
    return grid.spacing / speed if speed > 0 else float("inf")


def solve_transient(
    u0, velocity, kappa: float, grid: Grid, *, f=0.0, t_final: float, num_steps: int, num_frames: int = 1
) -> jnp.ndarray:
    """IMEX-Euler rollout from `u0 (n, n)`; returns `(num_frames, n, n)` at t_final (k + 1) / num_frames.

    `num_steps` must be a multiple of `num_frames`; dt = t_final / num_steps must
    satisfy the upwind limit `stable_dt` (checked when the velocity is concrete).
    """
    velocity, f = _check(grid, velocity, f)
    grid.check_field(u0, "u0")
    if not (isinstance(num_steps, int) and isinstance(num_frames, int) and num_frames >= 1):
        raise ValueError(f"num_steps, num_frames: expected integers >= 1, got {num_steps!r}, {num_frames!r}")
    if num_steps % num_frames:
        raise ValueError(f"num_steps: expected a multiple of num_frames={num_frames}, got {num_steps}")
    if not kappa > 0:
        raise ValueError(f"kappa: expected a positive diffusivity, got {kappa!r}")
    dt = t_final / num_steps
    if linear.is_concrete(velocity) and dt > stable_dt(velocity, grid) * (1 + 1e-12):
        raise ValueError(
            f"num_steps: dt = {dt:.3g} exceeds the upwind stability limit {stable_dt(velocity, grid):.3g}; "
            f"use at least {int(np.ceil(t_final / stable_dt(velocity, grid)))} steps"
        )
    u0 = jnp.asarray(u0, f.dtype)
    diagonal = 1.0 / dt + kappa * linear.laplacian_eigenvalues(grid, f.dtype)

    def step(u, _):
        rhs = u / dt - advection(u, velocity, grid) + f
        return linear.sine_diagonal_solve(rhs, diagonal), None

    def frame(u, _):
        u, _ = jax.lax.scan(step, u, None, length=num_steps // num_frames)
        return u, u

    _, frames = jax.lax.scan(frame, u0, None, length=num_frames)
    return frames


def steady_operator(velocity, kappa, grid: Grid):
    """``u -> kappa (-lap_h u) + b . grad_h u`` (non-symmetric for b != 0)."""
    return lambda u: -kappa * laplacian(u, grid) + advection(u, velocity, grid)


def solve_steady(velocity, kappa: float, grid: Grid, f=1.0, *, rtol: float | None = None, restart: int = 40):
    """Steady state ``kappa (-lap_h u) + b . grad_h u = f`` `(n, n)` by preconditioned GMRES.

    Suited to low and moderate Peclet numbers (the Poisson preconditioner degrades
    as advection dominates); implicit derivatives through `custom_linear_solve`.
    """
    velocity, f = _check(grid, velocity, f)
    if not kappa > 0:
        raise ValueError(f"kappa: expected a positive diffusivity, got {kappa!r}")
    rtol = linear.default_rtol(f.dtype) if rtol is None else rtol
    matvec = steady_operator(velocity, kappa, grid)

    def precondition(r):
        return linear.fast_poisson(r, grid) / kappa

    def gmres(op, b):
        x, _ = jsl.gmres(op, b, tol=rtol, atol=0.0, restart=restart, maxiter=20, M=precondition)
        return x

    def transpose_solve(op_t, b):
        return gmres(op_t, b)

    return jax.lax.custom_linear_solve(matvec, f, gmres, transpose_solve)


def residual_steady(u, velocity, kappa: float, grid: Grid, f=1.0) -> jnp.ndarray:
    """``f - (kappa (-lap_h) + b . grad_h) u`` `(n, n)`."""
    velocity, f = _check(grid, velocity, f)
    return f - steady_operator(velocity, kappa, grid)(u)


__all__ = [
    "advection",
    "laplacian",
    "residual_steady",
    "solve_steady",
    "solve_transient",
    "stable_dt",
    "steady_operator",
    "uniform_velocity",
]
