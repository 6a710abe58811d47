"""Dirichlet Poisson problem ``-lap u = f`` on the square, ``u = 0`` on the boundary.

Discretization: the 5-point Laplacian on the interior nodes of a Dirichlet
`Grid` (x_i = (i + 1) h, h = L / (n + 1)), second-order accurate for smooth
solutions. The discrete system is diagonal in the type-I sine basis, so `solve`
is exact (to rounding) and costs four dense `(n, n)` matmuls.

Shapes: one sample, `f` and `u` are `(n, n)` indexed `[y, x]`; vmap for batches.
Units: `f` in units of u / length^2.
"""

from __future__ import annotations

import jax.numpy as jnp

from posteriorjax.grids import Grid
from posteriorjax.physics import linear


def _prepare(f, grid: Grid, name: str = "f") -> jnp.ndarray:
    linear.check_dirichlet(grid)
    grid.check_field(f, name)
    return jnp.asarray(f, dtype=linear.float_dtype(f))


def apply(u: jnp.ndarray, grid: Grid) -> jnp.ndarray:
    """The 5-point ``-lap_h u`` `(n, n)` with zero boundary values around `u`."""
    h2 = grid.spacing**2
    up = jnp.pad(u, 1)
    return (4 * u - up[:-2, 1:-1] - up[2:, 1:-1] - up[1:-1, :-2] - up[1:-1, 2:]) / h2


def solve(f: jnp.ndarray, grid: Grid) -> jnp.ndarray:
    """Solve ``-lap u = f`` with ``u = 0`` on the boundary of ``[0, L]^2``.

    Args:
      f: source `(n, n)` on the interior nodes of `grid`.
      grid: a `Grid` with ``bc="dirichlet"`` (static).

    Returns:
      u `(n, n)`, the exact solution of the 5-point system (second-order
      accurate in h). Differentiable (the map is linear); jit/vmap-able.
    """
    f = _prepare(f, grid)
    return linear.fast_poisson(f, grid)


def residual(f: jnp.ndarray, u: jnp.ndarray, grid: Grid) -> jnp.ndarray:
    """Discrete residual ``f - (-lap_h u)`` `(n, n)` (zero for the exact discrete solution)."""
    f = _prepare(f, grid)
    grid.check_field(u, "u")
    return f - apply(u, grid)
