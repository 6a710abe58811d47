"""Dirichlet Helmholtz problem ``-lap u - k^2 u + damping u = f``, ``u = 0`` on the boundary.

Discretization: the 5-point Laplacian on the interior nodes of a Dirichlet
`Grid` (second-order accurate in h for smooth solutions; the phase error grows
like k^3 h^2, so keep k h well below 1). The discrete operator is diagonal in
the type-I sine basis with eigenvalues ``lambda_pq - k^2 + damping``, so
`solve` is exact for any k, including the indefinite range ``k^2 > lambda_11``,
as long as k^2 - damping is not an eigenvalue of ``-lap_h`` (resonance).

``damping`` is a *real* reaction term: ``+damping u`` shifts every eigenvalue
by ``damping`` (a positive value moves the operator towards definiteness and
away from resonances). The fields stay real; there is no complex absorption.

Shapes: one sample, `f`, `u` `(n, n)` indexed `[y, x]`; `k`, `damping` scalars
(arrays allowed, differentiable). Units: k in radians per unit length.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from posteriorjax.grids import Grid, dirichlet_laplacian_eigenvalues
from posteriorjax.physics import linear, poisson


def _scalar(x, name: str) -> jnp.ndarray:
    if jnp.ndim(x) != 0:
        raise ValueError(f"{name}: expected a scalar, got shape {tuple(jnp.shape(x))}")
    if linear.is_concrete(x) and not np.isfinite(np.asarray(x)):
        raise ValueError(f"{name}: expected a finite scalar, got {np.asarray(x)!r}")
    return x


def check_resonance(grid: Grid, k, damping=0.0, *, resonance_tol: float | None = None, dtype=None) -> None:
    """Raise ValueError if ``k^2 - damping`` is within `resonance_tol` (relative) of an eigenvalue.

    The test is ``|lambda_pq + damping - k^2| <= resonance_tol * max(lambda_pq, k^2)``
    for the eigenvalues ``lambda_pq`` of the 5-point ``-lap_h``; the default
    tolerance is sqrt(machine epsilon) of `dtype` (float32 unless given).
    Needs concrete `k` and `damping` (call outside jit).
    """
    dtype = jnp.float32 if dtype is None else dtype
    # the solve amplifies round-off by about 1 / (relative gap): below sqrt(eps) fewer than half
    # of the digits survive
    tol = float(np.sqrt(jnp.finfo(dtype).eps)) if resonance_tol is None else resonance_tol
    lam = dirichlet_laplacian_eigenvalues(grid.n, grid.length)
    k2 = float(np.asarray(k, np.float64)) ** 2
    gap = np.abs(lam + float(np.asarray(damping, np.float64)) - k2)
    rel = gap / np.maximum(lam, k2)
    idx = np.unravel_index(np.argmin(rel), rel.shape)
    if rel[idx] <= tol:
        p, q = idx[0] + 1, idx[1] + 1
        raise ValueError(
            f"k: expected k^2 - damping away from the eigenvalues of -lap_h (relative gap > {tol:.2g}), "
            f"got k={float(np.asarray(k)):.17g}, damping={float(np.asarray(damping)):.6g}: near-resonant "
            f"with mode (p, q)=({p}, {q}), lambda={lam[idx]:.17g}, relative gap {rel[idx]:.3g}"
        )


def _diagonal(grid: Grid, k, damping, dtype) -> jnp.ndarray:
    lam = linear.laplacian_eigenvalues(grid, dtype)
    return lam - jnp.asarray(k, dtype) ** 2 + jnp.asarray(damping, dtype)


def solve(f: jnp.ndarray, grid: Grid, k, *, damping=0.0, resonance_tol: float | None = None) -> jnp.ndarray:
    """Solve ``-lap u - k^2 u + damping u = f`` with ``u = 0`` on the boundary.

    Args:
      f: source `(n, n)` on the interior nodes of `grid`.
      grid: a `Grid` with ``bc="dirichlet"`` (static).
      k: wavenumber (scalar, may be traced; the solution is differentiable in k).
      damping: real reaction coefficient (scalar, default 0).
      resonance_tol: relative eigenvalue gap below which a concrete `k` is
        rejected (see `check_resonance`). Under jit the check is skipped and a
        resonant k gives non-finite or huge values.

    Returns:
      u `(n, n)`, exact solution of the 5-point system (second order in h).
    """
    linear.check_dirichlet(grid)
    grid.check_field(f, "f")
    _scalar(k, "k")
    _scalar(damping, "damping")
    dtype = linear.float_dtype(f, k, damping)
    if linear.is_concrete(k) and linear.is_concrete(damping):
        check_resonance(grid, k, damping, resonance_tol=resonance_tol, dtype=dtype)
    f = jnp.asarray(f, dtype)
    return linear.sine_diagonal_solve(f, _diagonal(grid, k, damping, dtype))


def apply(u: jnp.ndarray, grid: Grid, k, *, damping=0.0) -> jnp.ndarray:
    """The discrete operator ``-lap_h u - k^2 u + damping u`` `(n, n)`."""
    return poisson.apply(u, grid) + (damping - k**2) * u


def residual(f: jnp.ndarray, u: jnp.ndarray, grid: Grid, k, *, damping=0.0) -> jnp.ndarray:
    """Discrete residual ``f - (-lap_h u - k^2 u + damping u)`` `(n, n)`."""
    linear.check_dirichlet(grid)
    grid.check_field(f, "f")
    grid.check_field(u, "u")
    _scalar(k, "k")
    _scalar(damping, "damping")
    return f - apply(u, grid, k, damping=damping)
