"""Elliptic forward solvers: Poisson, Helmholtz (DST-I, exact) and Darcy (PCG).

Numerics are checked against mathematics: manufactured solutions with a
regressed second-order convergence rate, residuals of the discrete systems,
an independently assembled sparse matrix, and `check_grads` in float64.
"""

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg

from posteriorjax.grids import Grid, dst1
from posteriorjax.physics import darcy, helmholtz, linear, poisson

REFINEMENT = (15, 31, 63)


# ----------------------------------------------------------------------------
# Manufactured solutions (derivatives by autodiff of the point functions)


def u_exact(p):
    y, x = p[0], p[1]
    return jnp.sin(jnp.pi * x) * jnp.sin(jnp.pi * y) * jnp.exp(x - 0.5 * y)


def a_smooth(p):
    y, x = p[0], p[1]
    return 1.5 + jnp.sin(2 * jnp.pi * x) * jnp.cos(jnp.pi * y) + x * y


def _on_grids(fn, ns):
    """Point function `fn((y, x))` on the Dirichlet grids of sizes `ns` (one compile)."""
    points = [np.stack([c.ravel() for c in Grid(n).mesh()], axis=1) for n in ns]
    values = jax.jit(jax.vmap(fn))(jnp.asarray(np.concatenate(points)))
    splits = np.cumsum([n * n for n in ns])[:-1]
    return [v.reshape(n, n) for v, n in zip(jnp.split(values, splits), ns, strict=True)]


def _neg_div_flux(coeff):
    def f(p):
        flux = lambda q: coeff(q) * jax.grad(u_exact)(q)  # noqa: E731
        return -jnp.trace(jax.jacfwd(flux)(p))

    return f


def _slope(ns, errors):
    h = 1.0 / (np.asarray(ns) + 1.0)
    return np.polyfit(np.log(h), np.log(errors), 1)[0]


def _normal(seed, shape):
    """Test data from NumPy's generator (no per-shape PRNG compilation)."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape))


def _binary_coefficient(grid, seed):
    """A 12/3 field thresholded from a smooth random function."""
    y, x = grid.mesh()
    c = np.random.default_rng(seed).standard_normal((4, 4))
    g = sum(
        c[i, j] * np.sin((i + 1) * np.pi * x + j) * np.cos((j + 1) * np.pi * y)
        for i in range(4)
        for j in range(4)
    )
    return jnp.asarray(np.where(g > 0, 12.0, 3.0))


def _scipy_darcy_matrix(a, h):
    """Independent assembly of the harmonic-face finite-volume matrix."""
    a = np.asarray(a, np.float64)
    n = a.shape[0]
    idx = np.arange(n * n).reshape(n, n)
    rows, cols, vals = [], [], []
    for i in range(n):
        for j in range(n):
            diag = 0.0
            for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                ii, jj = i + di, j + dj
                if 0 <= ii < n and 0 <= jj < n:
                    af = 2 * a[i, j] * a[ii, jj] / (a[i, j] + a[ii, jj])
                    rows.append(idx[i, j])
                    cols.append(idx[ii, jj])
                    vals.append(-af / h**2)
                else:
                    af = a[i, j]
                diag += af / h**2
            rows.append(idx[i, j])
            cols.append(idx[i, j])
            vals.append(diag)
    return scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(n * n, n * n))


# ----------------------------------------------------------------------------
# Convergence under refinement


def test_sine_transform_matches_fft_dst(x64):
    x = _normal(0, (9, 9))
    np.testing.assert_allclose(linear.sine_transform(x), dst1(x), atol=1e-13)
    np.testing.assert_allclose(linear.sine_transform(linear.sine_transform(x)), x, atol=1e-13)


def test_poisson_second_order(x64):
    errors = []
    sources = _on_grids(lambda p: -jnp.trace(jax.hessian(u_exact)(p)), REFINEMENT)
    for n, f, exact in zip(REFINEMENT, sources, _on_grids(u_exact, REFINEMENT), strict=True):
        grid = Grid(n)
        u = poisson.solve(f, grid)
        assert float(jnp.linalg.norm(poisson.residual(f, u, grid)) / jnp.linalg.norm(f)) < 1e-12
        errors.append(float(jnp.max(jnp.abs(u - exact))))
    assert 1.9 < _slope(REFINEMENT, errors) < 2.2, errors


@pytest.mark.parametrize(
    "k, ns",
    [(1.0, REFINEMENT), (2 * np.pi * 1.5, REFINEMENT), (2 * np.pi * 2, (31, 63, 127))],
)
def test_helmholtz_second_order(x64, k, ns):
    """Indefinite for k^2 > 2 pi^2; at k = 4 pi the n = 15 grid (k h ~ 0.8) is pre-asymptotic."""
    errors = []
    sources = _on_grids(lambda p: -jnp.trace(jax.hessian(u_exact)(p)) - k**2 * u_exact(p), ns)
    exacts = _on_grids(u_exact, ns)
    for n, f, exact in zip(ns, sources, exacts, strict=True):
        grid = Grid(n)
        u = helmholtz.solve(f, grid, k)
        assert float(jnp.linalg.norm(helmholtz.residual(f, u, grid, k)) / jnp.linalg.norm(f)) < 1e-10
        errors.append(float(jnp.max(jnp.abs(u - exact))))
    slope = _slope(ns, errors)
    assert 1.8 < slope < 2.3, (slope, errors)
    assert errors[-1] < 1e-2 * float(jnp.max(jnp.abs(exacts[-1])))


def test_helmholtz_damping_is_a_real_shift(x64):
    grid = Grid(16)
    f = _normal(1, grid.shape)
    u = helmholtz.solve(f, grid, 7.0, damping=5.0)
    np.testing.assert_allclose(u, helmholtz.solve(f, grid, np.sqrt(49.0 - 5.0)), rtol=1e-12, atol=1e-14)
    assert float(jnp.max(jnp.abs(helmholtz.residual(f, u, grid, 7.0, damping=5.0)))) < 1e-9


def test_darcy_second_order_smooth_coefficient(x64):
    """The local order approaches 2 from below (ratios 3.47, 3.76, 3.89, 3.95 from n = 15 to 255)."""
    ns = (31, 63, 127)
    errors = []
    coeffs, sources = _on_grids(a_smooth, ns), _on_grids(_neg_div_flux(a_smooth), ns)
    for n, a, f, exact in zip(ns, coeffs, sources, _on_grids(u_exact, ns), strict=True):
        u = jax.jit(darcy.solve, static_argnums=1)(a, Grid(n), f)
        errors.append(float(jnp.max(jnp.abs(u - exact))))
    assert 1.9 < _slope(ns, errors) < 2.1, errors
    assert errors[-2] / errors[-1] > 3.8, errors


# ----------------------------------------------------------------------------
# Darcy: residual, iteration count, agreement with a sparse direct solve


def test_darcy_binary_coefficient_residual(x64):
    grid = Grid(64)
    a = _binary_coefficient(grid, 5)
    u, info = darcy.solve_with_info(a, grid)
    rel = float(jnp.linalg.norm(darcy.residual(a, u, grid)) / jnp.linalg.norm(jnp.ones(grid.shape)))
    assert rel < 1e-6
    assert int(info.iterations) <= 40, int(info.iterations)
    np.testing.assert_allclose(darcy.solve(a, grid), u, rtol=0, atol=1e-12)


def test_darcy_matches_sparse_direct_solve(x64):
    grid = Grid(16)
    a = _binary_coefficient(grid, 6) * jnp.exp(0.3 * _normal(7, grid.shape))
    f = _normal(8, grid.shape)
    matrix = _scipy_darcy_matrix(a, grid.spacing)
    expected = scipy.sparse.linalg.spsolve(matrix, np.asarray(f).ravel()).reshape(grid.shape)
    np.testing.assert_allclose(darcy.solve(a, grid, f), expected, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(
        darcy.operator(a, grid)(f), (matrix @ np.asarray(f).ravel()).reshape(grid.shape)
    )


def test_darcy_constant_coefficient_is_scaled_poisson(x64):
    grid = Grid(20)
    f = _normal(2, grid.shape)
    np.testing.assert_allclose(
        darcy.solve(jnp.full(grid.shape, 4.0), grid, f), poisson.solve(f, grid) / 4.0, atol=1e-12
    )


def test_darcy_float32_close_to_float64():
    """float32 solves and implicit gradients stay finite and close to float64."""
    grid = Grid(32)
    a = _binary_coefficient(grid, 9)

    @jax.jit
    def run(a):  # u and the gradient of ||u||^2 / 2
        u, pullback = jax.vjp(lambda a: darcy.solve(a, grid), a)
        return u, pullback(u)[0]

    u32, g32 = run(a.astype(jnp.float32))
    assert u32.dtype == g32.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(g32)))
    with jax.enable_x64(True):
        u64, g64 = run(jnp.asarray(np.asarray(a), jnp.float64))
        err_u = float(jnp.max(jnp.abs(u32.astype(jnp.float64) - u64)) / jnp.max(jnp.abs(u64)))
        err_g = float(jnp.max(jnp.abs(g32.astype(jnp.float64) - g64)) / jnp.max(jnp.abs(g64)))
    assert err_u < 1e-4, err_u
    assert err_g < 1e-3, err_g


# ----------------------------------------------------------------------------
# PCG guards


def test_pcg_zero_rhs_and_fixed_iterations_stay_finite(x64):
    grid = Grid(12)
    a = jnp.linspace(1.0, 5.0, grid.n * grid.n).reshape(grid.shape)
    mv = darcy.operator(a, grid)
    pre = linear.poisson_preconditioner(grid, linear.geometric_mean(a))
    pcg = jax.jit(
        lambda b, rtol=None, maxiter=500: linear.pcg(mv, b, pre, rtol=rtol, maxiter=maxiter),
        static_argnums=(1, 2),
    )
    x0, info0 = pcg(jnp.zeros(grid.shape))
    assert int(info0.iterations) == 0 and bool(jnp.all(x0 == 0))
    b = jnp.ones(grid.shape)
    x_tol = pcg(b)[0]
    x_fix, info = pcg(b, 0.0, 200)
    assert int(info.iterations) == 200
    assert bool(jnp.all(jnp.isfinite(x_fix)))
    np.testing.assert_allclose(x_fix, x_tol, atol=1e-9 * float(jnp.max(jnp.abs(x_tol))))
    batch = jnp.stack([jnp.zeros(grid.shape), b])
    xs = jax.jit(jax.vmap(lambda r: pcg(r)[0]))(batch)
    assert bool(jnp.all(xs[0] == 0))
    np.testing.assert_allclose(xs[1], x_tol, atol=1e-12)


# ----------------------------------------------------------------------------
# Derivatives (float64)


def test_check_grads_poisson(x64):
    grid = Grid(10)
    f = _normal(3, grid.shape)
    jax.test_util.check_grads(lambda f: poisson.solve(f, grid), (f,), order=1, modes=("fwd", "rev"))


def test_check_grads_helmholtz(x64):
    grid = Grid(10)
    f = _normal(4, grid.shape)
    k = jnp.asarray(2 * np.pi * 1.5)
    jax.test_util.check_grads(lambda f, k: helmholtz.solve(f, grid, k), (f, k), order=1, modes=("fwd", "rev"))


def test_check_grads_darcy(x64):
    grid = Grid(10)
    a = jnp.exp(0.5 * _normal(10, grid.shape)) + 1.0
    f = _normal(11, grid.shape)
    fn = jax.jit(lambda a, f: darcy.solve(a, grid, f, rtol=1e-13))
    jax.test_util.check_grads(fn, (a, f), order=1, modes=("fwd", "rev"))


def test_darcy_jacfwd_equals_jacrev(x64):
    grid = Grid(5)
    a = 2.0 + jnp.abs(_normal(12, grid.shape))
    fn = lambda a: darcy.solve(a, grid, rtol=1e-13)  # noqa: E731
    np.testing.assert_allclose(jax.jit(jax.jacfwd(fn))(a), jax.jit(jax.jacrev(fn))(a), rtol=1e-8, atol=1e-12)


# ----------------------------------------------------------------------------
# jit / vmap invariance


def _solvers(grid):
    return {
        "poisson": lambda x: poisson.solve(x, grid),
        "helmholtz": lambda x: helmholtz.solve(x, grid, 9.0),
        "darcy": lambda x: darcy.solve(3.0 + jnp.abs(x), grid, x),
    }


@pytest.mark.parametrize("name", ["poisson", "helmholtz", "darcy"])
def test_jit_and_vmap_match_loop(name):
    grid = Grid(16)
    fn = _solvers(grid)[name]
    xs = _normal(13, (3, *grid.shape)).astype(jnp.float32)
    loop = jnp.stack([fn(x) for x in xs])
    scale = float(jnp.max(jnp.abs(loop)))
    np.testing.assert_allclose(jax.jit(jax.vmap(fn))(xs), loop, atol=1e-5 * scale)


# ----------------------------------------------------------------------------
# Bad input


def test_wrong_shapes_raise():
    grid = Grid(8)
    with pytest.raises(ValueError, match=r"f: expected shape \(8, 8\).*got \(7, 8\)"):
        poisson.solve(jnp.zeros((7, 8)), grid)
    with pytest.raises(ValueError, match=r"f: expected shape \(8, 8\).*got \(8,\)"):
        helmholtz.solve(jnp.zeros(8), grid, 1.0)
    with pytest.raises(ValueError, match=r"a: expected shape \(8, 8\).*got \(1, 8, 8\)"):
        darcy.solve(jnp.ones((1, 8, 8)), grid)
    with pytest.raises(ValueError, match=r"f: expected shape \(8, 8\).*got \(4, 4\)"):
        darcy.solve(jnp.ones((8, 8)), grid, jnp.ones((4, 4)))
    with pytest.raises(ValueError, match="k: expected a scalar"):
        helmholtz.solve(jnp.zeros((8, 8)), grid, jnp.ones(2))
    with pytest.raises(ValueError, match="bc='dirichlet'"):
        poisson.solve(jnp.zeros((8, 8)), Grid(8, bc="periodic"))


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_darcy_bad_coefficient_raises(bad):
    grid = Grid(8)
    a = np.ones(grid.shape)
    a[3, 4] = bad
    with pytest.raises(ValueError, match="a: expected a positive, finite coefficient field, got"):
        darcy.solve(jnp.asarray(a), grid)
    with pytest.raises(Exception, match="a: expected a positive, finite coefficient field"):
        jax.block_until_ready(jax.jit(lambda a: darcy.solve(a, grid))(jnp.asarray(a)))


def test_helmholtz_resonance_raises(x64):
    grid = Grid(16)
    lam = linear.laplacian_eigenvalues(grid, jnp.float64)
    k = float(np.sqrt(lam[1, 2]))
    with pytest.raises(ValueError, match=r"k: .*near-resonant with mode \(p, q\)=\(2, 3\)"):
        helmholtz.solve(jnp.ones(grid.shape), grid, k)
    helmholtz.solve(jnp.ones(grid.shape), grid, k * 1.01)
