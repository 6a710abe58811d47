"""Shared linear algebra for the elliptic forward solvers.

Two building blocks:

* **Sine-diagonal solves.** On the interior nodes of a Dirichlet grid the
  5-point operator ``-lap_h + c`` (constant ``c``) is diagonal in the
  orthonormal type-I sine basis: with ``S`` the dense DST-I matrix
  (``S = S^T = S^{-1}``), ``-lap_h u + c u = f`` is solved exactly by
  ``u = S [(S f S) / (lambda + c)] S``, ``lambda_pq`` the eigenvalues of
  ``-lap_h`` (`posteriorjax.grids.dirichlet_laplacian_eigenvalues`). The dense
  matmul form beats the FFT-based DST on CPUs for n <= 128 (XLA's CPU FFT runs
  far below its matmul rate; the timing: docs/studies/performance.md, "Transforms
  as matmuls"), and its matmuls request ``Precision.HIGHEST`` so accelerators do
  not drop to TF32.

* **Preconditioned conjugate gradients.** `pcg` is a matrix-free PCG in a
  ``lax.while_loop`` that stops at ``||r|| <= rtol ||b||`` or ``maxiter``; under
  ``vmap`` the loop runs until every batch member has converged, and the step
  sizes are guarded so converged members (``r = 0``) stay put instead of
  producing 0/0. `solve_spd` wraps it in ``jax.lax.custom_linear_solve`` with
  ``symmetric=True``, so forward- and reverse-mode derivatives are implicit
  (one more PCG solve with the same operator) instead of differentiating
  through the iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from posteriorjax.grids import Grid, dirichlet_laplacian_eigenvalues, sine_matrix

HIGHEST = jax.lax.Precision.HIGHEST


def float_dtype(*xs) -> jnp.dtype:
    """The floating dtype the solvers compute in: promotion of `xs`, at least float."""
    dtype = jnp.result_type(*xs)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(dtype, float)
    return dtype


def check_dirichlet(grid, name: str = "grid") -> None:
    """Raise unless `grid` is a `Grid` with ``bc="dirichlet"``."""
    if not isinstance(grid, Grid):
        raise TypeError(f"{name}: expected a posteriorjax.grids.Grid, got {type(grid).__name__}")
    if grid.bc != "dirichlet":
        raise ValueError(f"{name}: expected a Grid with bc='dirichlet', got bc={grid.bc!r}")


def is_concrete(x) -> bool:
    """True when `x` holds values (not a tracer under jit/vmap/grad)."""
    return not isinstance(x, jax.core.Tracer)


# ----------------------------------------------------------------------------
# Sine-diagonal solves


def sine_transform(x: jnp.ndarray) -> jnp.ndarray:
    """Orthonormal 2-D DST-I ``S x S`` of one field `(n, n)` (self-inverse).

    Dense matmul form, `Precision.HIGHEST`; agrees with `grids.dst1` to rounding.
    """
    n = x.shape[-1]
    s = jnp.asarray(sine_matrix(n), dtype=x.dtype)
    return jnp.matmul(jnp.matmul(s, x, precision=HIGHEST), s, precision=HIGHEST)


def laplacian_eigenvalues(grid: Grid, dtype) -> jnp.ndarray:
    """Eigenvalues `(n, n)` of the 5-point ``-lap_h`` on `grid`, in 1/length^2."""
    return jnp.asarray(dirichlet_laplacian_eigenvalues(grid.n, grid.length), dtype=dtype)


def sine_diagonal_solve(f: jnp.ndarray, diagonal: jnp.ndarray) -> jnp.ndarray:
    """Solve ``S diag(diagonal) S u = f`` exactly: ``u = S [(S f S) / diagonal] S``.

    Args:
      f: right-hand side `(n, n)` on interior Dirichlet nodes.
      diagonal: the operator's eigenvalues `(n, n)` in the DST-I basis (nonzero).
    """
    return sine_transform(sine_transform(f) / diagonal)


def fast_poisson(f: jnp.ndarray, grid: Grid) -> jnp.ndarray:
    """Exact solution of the 5-point ``-lap_h u = f``, ``u = 0`` on the boundary.

    `f` `(n, n)` on the interior nodes of a Dirichlet `grid`; cost 4 dense
    `(n, n)` matmuls. Second-order accurate for smooth data.
    """
    return sine_diagonal_solve(f, laplacian_eigenvalues(grid, f.dtype))


# ----------------------------------------------------------------------------
# Preconditioned conjugate gradients


class PCGInfo(NamedTuple):
    """Diagnostics of one `pcg` run.

    Attributes:
      iterations: CG iterations taken (int32 scalar).
      residual_norm: recurrence residual ``||b - A x||_2`` at exit.
      rhs_norm: ``||b||_2``.
    """

    iterations: jnp.ndarray
    residual_norm: jnp.ndarray
    rhs_norm: jnp.ndarray


def default_rtol(dtype) -> float:
    """Relative-residual target: 1e-10 in float64, 1e-5 in float32 or lower."""
    return 1e-10 if jnp.finfo(dtype).bits >= 64 else 1e-5


def _vdot(x, y):
    return jnp.sum(x * y)


def pcg(
    matvec: Callable,
    b: jnp.ndarray,
    precondition: Callable,
    *,
    rtol: float | None = None,
    maxiter: int = 500,
) -> tuple[jnp.ndarray, PCGInfo]:
    """Preconditioned CG for a symmetric positive-definite ``A x = b`` (x0 = 0).

    Stops when ``||r||_2 <= rtol ||b||_2`` (recurrence residual) or after
    `maxiter` iterations; ``rtol=0`` gives exactly `maxiter` iterations. Step
    sizes are set to zero once ``r`` or ``p^T A p`` vanish, so running past
    convergence (as batched loops under ``vmap`` do) leaves ``x`` unchanged.

    Args:
      matvec: ``x -> A x`` on arrays shaped like `b`.
      b: right-hand side (any shape).
      precondition: ``r -> M^{-1} r``, symmetric positive definite.
      rtol: relative tolerance; default `default_rtol(b.dtype)`.
      maxiter: iteration cap (static).

    Returns:
      ``(x, PCGInfo)``.
    """
    rtol = default_rtol(b.dtype) if rtol is None else rtol
    bnorm = jnp.sqrt(_vdot(b, b))
    threshold = rtol * bnorm
    x = jnp.zeros_like(b)
    r = b
    z = precondition(r)
    p = z
    rz = _vdot(r, z)
    rnorm = bnorm

    def cond(state):
        _, _, _, _, _, rnorm, k = state
        return (rnorm > threshold) & (k < maxiter)

    def body(state):
        x, r, z, p, rz, _, k = state
        ap = matvec(p)
        pap = _vdot(p, ap)
        # under vmap the loop runs on for members already converged, where r = p = 0 makes these
        # ratios 0 / 0: the guards keep such a member where it is
        alpha = jnp.where(pap > 0, rz / jnp.where(pap > 0, pap, 1), 0)
        x = x + alpha * p
        r = r - alpha * ap
        z = precondition(r)
        rz_new = _vdot(r, z)
        beta = jnp.where(rz > 0, rz_new / jnp.where(rz > 0, rz, 1), 0)
        p = z + beta * p
        return x, r, z, p, rz_new, jnp.sqrt(_vdot(r, r)), k + 1

    state = (x, r, z, p, rz, rnorm, jnp.asarray(0, jnp.int32))
    x, _, _, _, _, rnorm, k = jax.lax.while_loop(cond, body, state)
    return x, PCGInfo(k, rnorm, bnorm)


def solve_spd(
    matvec: Callable,
    b: jnp.ndarray,
    precondition: Callable,
    *,
    rtol: float | None = None,
    maxiter: int = 500,
) -> jnp.ndarray:
    """``A^{-1} b`` by `pcg`, with implicit derivatives (``custom_linear_solve``).

    ``A`` must be symmetric positive definite. Derivatives with respect to `b`
    and to arrays `matvec` closes over are those of the exact inverse,
    ``dx = A^{-1} (db - dA x)``, each costing one more PCG solve; the
    preconditioner is treated as a constant.
    """

    def solve(mv, rhs):
        return pcg(mv, rhs, precondition, rtol=rtol, maxiter=maxiter)[0]

    return jax.lax.custom_linear_solve(matvec, b, solve, symmetric=True)


def geometric_mean(a: jnp.ndarray) -> jnp.ndarray:
    """``exp(mean(log a))`` of a positive field."""
    return jnp.exp(jnp.mean(jnp.log(a)))


def poisson_preconditioner(grid: Grid, scale: jnp.ndarray) -> Callable:
    """``r -> (-lap_h)^{-1} r / scale``: the constant-coefficient fast solve.

    For ``-div(a grad u)`` with ``scale`` the geometric mean of ``a``, PCG needs
    a grid-independent number of iterations (docs/discrete-consistency.md gives the
    counts). `scale` is held constant under differentiation: a preconditioner changes
    the iterations, not the solution, so no derivative should flow through it.
    """
    scale = jax.lax.stop_gradient(scale)

    def precondition(r):
        return fast_poisson(r, grid) / scale.astype(r.dtype)

    return precondition


__all__ = [
    "PCGInfo",
    "check_dirichlet",
    "default_rtol",
    "fast_poisson",
    "float_dtype",
    "geometric_mean",
    "is_concrete",
    "laplacian_eigenvalues",
    "pcg",
    "poisson_preconditioner",
    "sine_diagonal_solve",
    "sine_transform",
    "solve_spd",
]
