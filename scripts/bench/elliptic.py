"""Elliptic solvers: vmapped, jitted float32 solves/second beside SciPy on the same discretization.

* ``darcy``: `posteriorjax.physics.darcy.solve` (PCG + fast Poisson preconditioner)
  on binary 12/3 coefficients vs `scipy.sparse.linalg.spsolve` per sample on the
  same harmonic-face finite-volume matrix (assembled with `scipy.sparse`;
  assembly not timed, the direct solve in float64, SciPy's native precision).
* ``poisson``: `posteriorjax.physics.poisson.solve` (dense DST-I matmuls) vs the
  same sine-transform solve with `scipy.fft.dstn`/`idstn` (type 1, orthonormal),
  float32, batched over the sample axis with all CPU workers.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import scipy.fft
import scipy.sparse
import scipy.sparse.linalg

from bench.common import best_time, record
from posteriorjax.grids import Grid, dirichlet_laplacian_eigenvalues
from posteriorjax.physics import darcy, poisson


def _sizes(args) -> list[tuple[int, int]]:
    """(n, batch) pairs."""
    if getattr(args, "device", False):
        return [(64, 4096), (128, 1024), (256, 256)]
    return [(64, 64), (128, 16)]


def binary_coefficients(seed: int, batch: int, n: int) -> np.ndarray:
    """Binary 12/3 fields `(batch, n, n)`: a zero-mean Gaussian field thresholded at 0.

    Periodic spectral Gaussian field with amplitude (4 pi^2 |k|^2 + 9)^-1, the
    covariance of the FNO Darcy generator (alpha = 2, tau = 3).
    """
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(n, d=1.0 / n)
    decay = (4 * np.pi**2 * (k[:, None] ** 2 + k[None, :] ** 2) + 9.0) ** -1.0
    noise = rng.standard_normal((batch, n, n)) + 1j * rng.standard_normal((batch, n, n))
    decay[0, 0] = 0.0  # zero-mean field, so every sample has both phases
    field = np.fft.ifft2(noise * decay).real
    return np.where(field >= 0, 12.0, 3.0)


def darcy_matrix(a: np.ndarray, h: float) -> scipy.sparse.csr_matrix:
    """The harmonic-face matrix of `darcy.operator` for one coefficient `(n, n)`."""
    n = a.shape[0]
    harm = lambda p, q: 2 * p * q / (p + q)  # noqa: E731
    ax = np.concatenate([a[:, :1], harm(a[:, :-1], a[:, 1:]), a[:, -1:]], axis=1)  # (n, n+1)
    ay = np.concatenate([a[:1, :], harm(a[:-1, :], a[1:, :]), a[-1:, :]], axis=0)  # (n+1, n)
    idx = np.arange(n * n).reshape(n, n)
    diag = (ax[:, 1:] + ax[:, :-1] + ay[1:, :] + ay[:-1, :]).ravel()
    rows = [idx.ravel(), idx[:, :-1].ravel(), idx[:, 1:].ravel(), idx[:-1, :].ravel(), idx[1:, :].ravel()]
    cols = [idx.ravel(), idx[:, 1:].ravel(), idx[:, :-1].ravel(), idx[1:, :].ravel(), idx[:-1, :].ravel()]
    vals = [diag, -ax[:, 1:-1].ravel(), -ax[:, 1:-1].ravel(), -ay[1:-1, :].ravel(), -ay[1:-1, :].ravel()]
    matrix = scipy.sparse.coo_matrix(
        (np.concatenate(vals) / h**2, (np.concatenate(rows), np.concatenate(cols))), shape=(n * n, n * n)
    )
    return matrix.tocsc()


def _spsolve_all(matrices, rhs):
    return [scipy.sparse.linalg.spsolve(m, rhs) for m in matrices]


def _scipy_poisson(f, lam, workers):
    spec = scipy.fft.dstn(f, type=1, axes=(-2, -1), norm="ortho", workers=workers)
    return scipy.fft.idstn(spec / lam, type=1, axes=(-2, -1), norm="ortho", workers=workers)


def bench_darcy(args) -> list[dict]:
    records = []
    for n, batch in _sizes(args):
        grid = Grid(n)
        a = binary_coefficients(n, batch, n)
        a32 = jnp.asarray(a, jnp.float32)
        ours_fn = jax.jit(jax.vmap(functools.partial(darcy.solve, grid=grid)))
        t_ours = best_time(ours_fn, a32, repeats=5)
        u = np.asarray(ours_fn(a32), np.float64)
        info_fn = jax.jit(jax.vmap(functools.partial(darcy.solve_with_info, grid=grid)))
        iterations = np.asarray(info_fn(a32)[1].iterations)

        num_base = min(batch, 16)
        matrices = [darcy_matrix(a[i], grid.spacing) for i in range(num_base)]
        rhs = np.ones(n * n)
        t_base = best_time(_spsolve_all, matrices, rhs, repeats=3)
        ref = np.stack([scipy.sparse.linalg.spsolve(m, rhs).reshape(n, n) for m in matrices])
        diff = np.max(np.abs(u[:num_base] - ref)) / np.max(np.abs(ref))
        residual = max(
            np.linalg.norm(rhs - matrices[i] @ u[i].ravel()) / np.linalg.norm(rhs) for i in range(num_base)
        )
        records.append(
            record(
                f"darcy/{n}x{n}",
                "solves/s",
                batch / t_ours,
                num_base / t_base,
                "scipy spsolve (f64, per sample)",
                n=n,
                batch=batch,
                dtype="float32",
                pcg_iterations_mean=float(iterations.mean()),
                pcg_iterations_max=int(iterations.max()),
                max_rel_diff_vs_scipy=float(diff),
                rel_residual_max=float(residual),
                baseline_samples=num_base,
            )
        )
    return records


def bench_poisson(args) -> list[dict]:
    records = []
    workers = os.cpu_count() or 1
    for n, batch in _sizes(args):
        grid = Grid(n)
        batch = batch * 4
        f = np.random.default_rng(n).standard_normal((batch, n, n)).astype(np.float32)
        f32 = jnp.asarray(f)
        ours_fn = jax.jit(jax.vmap(functools.partial(poisson.solve, grid=grid)))
        t_ours = best_time(ours_fn, f32, repeats=7)
        lam = dirichlet_laplacian_eigenvalues(n, grid.length)
        t_base = best_time(_scipy_poisson, f, lam.astype(np.float32), workers, repeats=7)
        ref = _scipy_poisson(f.astype(np.float64), lam, workers)
        diff = np.max(np.abs(np.asarray(ours_fn(f32), np.float64) - ref)) / np.max(np.abs(ref))
        records.append(
            record(
                f"poisson/{n}x{n}",
                "solves/s",
                batch / t_ours,
                batch / t_base,
                f"scipy.fft.dstn (f32, batched, {workers} workers)",
                n=n,
                batch=batch,
                dtype="float32",
                max_rel_diff_vs_float64=float(diff),
            )
        )
    return records


BENCHMARKS = {"darcy": bench_darcy, "poisson": bench_poisson}
