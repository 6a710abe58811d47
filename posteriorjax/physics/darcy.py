"""Darcy flow ``-div(a grad u) = f`` on the square, ``u = 0`` on the boundary.

Discretization (finite volumes, second order for smooth `a` and `u`): unknowns
at the interior nodes of a Dirichlet `Grid` (x_i = (i + 1) h, h = L / (n + 1));
each node's control volume has four faces; the flux through the face between
neighbouring nodes uses the **harmonic mean** ``2 a_P a_E / (a_P + a_E)`` of
their coefficients (the exact series conductance of a piecewise-constant
medium, which keeps sharp 12/3 interfaces accurate), and a face on the boundary
uses the adjacent node's ``a`` with the boundary value 0 a distance h away:

    (A u)_P = (1 / h^2) sum_{faces F} a_F (u_P - u_F),   u_F = 0 off the grid.

``A`` is symmetric positive definite. It is solved matrix-free by conjugate
gradients preconditioned with the fast sine-transform Poisson solve scaled by
the geometric mean of ``a``: the iteration count is grid-independent and grows
with the contrast max a / min a (the counts: docs/discrete-consistency.md). It runs
through ``jax.lax.custom_linear_solve`` so derivatives in ``a`` and ``f`` are
implicit (one extra solve each), not backpropagated through the iterations.

Shapes: one sample; `a`, `u` `(n, n)` indexed `[y, x]`; `f` scalar or `(n, n)`.
Units: a in (u-flux) per unit gradient, f in flux per area.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.grids import Grid
from posteriorjax.physics import linear

_COEFF_MESSAGE = "a: expected a positive, finite coefficient field, got non-positive or non-finite values"


def _check_coefficient(a: jnp.ndarray) -> None:
    """ValueError for a concrete `a` that is not positive and finite (traced: see `_assert_positive`)."""
    if not linear.is_concrete(a):
        return
    values = np.asarray(a)
    bad_finite = int(np.sum(~np.isfinite(values)))
    bad_sign = int(np.sum(np.isfinite(values) & (values <= 0)))
    if bad_finite or bad_sign:
        finite = values[np.isfinite(values)]
        low = f"{finite.min():.6g}" if finite.size else "n/a"
        raise ValueError(
            f"a: expected a positive, finite coefficient field, got {bad_sign} non-positive and "
            f"{bad_finite} non-finite entries (min finite value {low})"
        )


def _assert_positive(a: jnp.ndarray) -> jnp.ndarray:
    return checks.error_if(a, ~jnp.all(jnp.isfinite(a) & (a > 0)), _COEFF_MESSAGE)


def _prepare(a, grid: Grid, f) -> tuple[jnp.ndarray, jnp.ndarray]:
    linear.check_dirichlet(grid)
    grid.check_field(a, "a")
    if jnp.ndim(f) != 0:
        grid.check_field(f, "f")
    dtype = linear.float_dtype(a, f)
    _check_coefficient(a)
    a = jnp.asarray(a, dtype)
    f = jnp.broadcast_to(jnp.asarray(f, dtype), grid.shape)
    return a, f


def face_coefficients(a: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Face coefficients ``(a_y (n+1, n), a_x (n, n+1))``.

    Interior faces: harmonic mean of the two adjacent nodes; the first and
    last faces of each line (on the boundary) take the adjacent node's value.
    """

    def faces(b):  # along the last axis
        inner = 2 * b[:, :-1] * b[:, 1:] / (b[:, :-1] + b[:, 1:])
        return jnp.concatenate([b[:, :1], inner, b[:, -1:]], axis=1)

    return faces(a.T).T, faces(a)


def operator(a: jnp.ndarray, grid: Grid) -> Callable[[jnp.ndarray], jnp.ndarray]:
    """The matrix-free operator ``u -> -div_h(a grad_h u)`` `(n, n) -> (n, n)`."""
    ay, ax = face_coefficients(a)
    h2 = grid.spacing**2

    def matvec(u):
        up = jnp.pad(u, 1)
        flux_x = ax * (up[1:-1, 1:] - up[1:-1, :-1])
        flux_y = ay * (up[1:, 1:-1] - up[:-1, 1:-1])
        return -((flux_x[:, 1:] - flux_x[:, :-1]) + (flux_y[1:, :] - flux_y[:-1, :])) / h2

    return matvec


@functools.partial(jax.jit, static_argnames=("grid", "rtol", "maxiter", "info"))
def _pcg_kernel(a, f, grid: Grid, rtol, maxiter: int, info: bool):
    # Compiled once per (shape, dtype, grid, options), so eager calls do not
    # re-trace the CG loop; under an outer jit it is inlined.
    a = _assert_positive(a)
    # A constant source (the default f = 1) would otherwise be constant-folded
    # through the dense sine matmuls at compile time (seconds at n = 255).
    f = jax.lax.optimization_barrier(f)
    precondition = linear.poisson_preconditioner(grid, linear.geometric_mean(a))
    if info:
        return linear.pcg(operator(a, grid), f, precondition, rtol=rtol, maxiter=maxiter)
    return linear.solve_spd(operator(a, grid), f, precondition, rtol=rtol, maxiter=maxiter)


def solve(a: jnp.ndarray, grid: Grid, f=1.0, *, rtol: float | None = None, maxiter: int = 500) -> jnp.ndarray:
    """Solve ``-div(a grad u) = f`` with ``u = 0`` on the boundary of ``[0, L]^2``.

    Args:
      a: coefficient (permeability) `(n, n)` on the interior nodes; positive
        and finite (ValueError outside jit, `checks.error_if` inside).
      grid: a `Grid` with ``bc="dirichlet"`` (static).
      f: source, a scalar (default 1) or a field `(n, n)`.
      rtol: PCG relative-residual target (default 1e-10 in float64, 1e-5 in
        float32); the solve stops there or after `maxiter` iterations.
      maxiter: PCG iteration cap (static).

    Returns:
      u `(n, n)`. jit/vmap/grad/jacfwd-able; derivatives are implicit.
    """
    a, f = _prepare(a, grid, f)
    return _pcg_kernel(a, f, grid, rtol, maxiter, False)


def solve_with_info(
    a: jnp.ndarray, grid: Grid, f=1.0, *, rtol: float | None = None, maxiter: int = 500
) -> tuple[jnp.ndarray, linear.PCGInfo]:
    """As `solve` (same PCG), returning ``(u, PCGInfo)``; not meant for differentiation."""
    a, f = _prepare(a, grid, f)
    return _pcg_kernel(a, f, grid, rtol, maxiter, True)


def residual(a: jnp.ndarray, u: jnp.ndarray, grid: Grid, f=1.0) -> jnp.ndarray:
    """Discrete residual ``f - A u`` `(n, n)` of the finite-volume system."""
    a, f = _prepare(a, grid, f)
    grid.check_field(u, "u")
    return f - operator(a, grid)(u)
