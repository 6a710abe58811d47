"""Two-layer light transport: slab solutions vs a SciPy BVP solve, energy conservation, limits,
layer-order symmetry, the adding method, lateral spread, derivatives and bad input."""

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
from scipy.integrate import quad, solve_bvp

from posteriorjax.physics import radiative as rt


def _fields(seed, shape=(2, 8, 8), lo=0.01, hi=5.0):
    return jnp.asarray(np.random.default_rng(seed).uniform(lo, hi, shape))


@pytest.mark.parametrize("albedo, asymmetry, tau", [(0.9, 0.5, 2.0), (1.0, 0.0, 3.0), (0.3, 0.8, 0.7)])
def test_slab_matches_a_numerical_two_stream_solve(x64, albedo, asymmetry, tau):
    """R, T and the absorbed flux integral against scipy.integrate.solve_bvp on the same ODEs."""
    w, _, g1, g2, g3, g4, _, mu0, f = rt._coefficients(albedo, asymmetry, 1.0)
    assert mu0 == 1.0  # away from the two-stream resonance
    ts = (1 - albedo * f) * tau

    def fun(x, y):
        beam = np.exp(-x / mu0) / mu0
        return np.vstack([g1 * y[0] - g2 * y[1] - g3 * w * beam, g2 * y[0] - g1 * y[1] + g4 * w * beam])

    x = np.linspace(0, ts, 100)
    sol = solve_bvp(
        fun, lambda a, b: np.array([a[1], b[0]]), x, np.zeros((2, 100)), tol=1e-10, max_nodes=10**5
    )
    refl, trans = sol.sol(0.0)[0], sol.sol(ts)[1] + np.exp(-ts)
    absorbed = quad(lambda s: (g1 - g2) * sol.sol(s).sum() + (1 - w) * np.exp(-s), 0, ts, epsabs=1e-13)[0]
    out = rt.slab(jnp.asarray(tau), albedo, asymmetry)
    assert float(out.s_r) == pytest.approx(refl, abs=1e-9)
    assert float(out.s_t + out.e) == pytest.approx(trans, abs=1e-9)
    assert refl + trans + absorbed == pytest.approx(1.0, abs=1e-9)


@pytest.fixture(scope="module")
def random_medium():
    with jax.enable_x64(True):
        sigma = _fields(0, (2, 12, 12))
        out = rt.transport(sigma, albedo=0.8, asymmetry=0.6, spread=1.5)
        return np.asarray(sigma), jax.tree.map(np.asarray, out)


def test_energy_conservation(random_medium):
    sigma, out = random_medium
    total = out.reflectance + out.transmittance + out.absorption.sum(0)
    assert float(np.mean(total)) == pytest.approx(1.0, abs=1e-9)
    assert float(out.absorption.min()) >= 0 and float(out.reflectance.min()) >= 0
    assert float(np.abs(total - 1).max()) > 1e-6  # the lateral spread does move energy between pixels


def test_conservative_scattering_reflects_or_transmits_everything(x64):
    out = rt.transport(_fields(1, (2, 6, 6)), albedo=1.0, asymmetry=0.7)
    assert float(jnp.mean(out.reflectance + out.transmittance)) == pytest.approx(1.0, abs=1e-9)
    uniform = rt.transport(jnp.full((2, 6, 6), 2.0), albedo=1.0, asymmetry=0.7)
    np.testing.assert_allclose(uniform.reflectance + uniform.transmittance, 1.0, atol=1e-12)


def test_zero_and_thin_extinction_limits(x64):
    empty = rt.transport(jnp.zeros((2, 6, 6)))
    np.testing.assert_array_equal(np.asarray(empty.transmittance), 1.0)
    np.testing.assert_array_equal(np.asarray(empty.reflectance), 0.0)
    for tau in (1e-2, 1e-3, 1e-4):
        out = rt.transport(jnp.full((2, 6, 6), tau / 2), albedo=0.9, asymmetry=0.5)
        gap = np.abs(np.asarray(out.transmittance) - np.exp(-tau))
        assert gap.max() < tau  # T -> exp(-tau) with the scattered part O(tau)
        assert float(out.reflectance.max()) < tau


def test_purely_absorbing_transmittance_is_beer_lambert_and_layer_order_symmetric(x64):
    sigma = _fields(2, (2, 6, 6))
    out = rt.transport(sigma, albedo=0.0, asymmetry=0.4, mu0=0.7, spread=2.0)
    swapped = rt.transport(sigma[::-1], albedo=0.0, asymmetry=0.4, mu0=0.7, spread=2.0)
    np.testing.assert_allclose(out.transmittance, jnp.exp(-sigma.sum(0) / 0.7), rtol=1e-12)
    np.testing.assert_allclose(out.transmittance, swapped.transmittance, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(out.reflectance), 0.0)


@pytest.mark.parametrize("spread", [0.0, 1.5])
def test_adding_two_halves_gives_the_whole_slab(x64, spread):
    out = rt.transport(jnp.full((2, 5, 5), 1.3), albedo=0.9, asymmetry=0.5, spread=spread)
    whole = rt.slab(jnp.asarray(2.6), 0.9, 0.5)
    np.testing.assert_allclose(out.reflectance, whole.s_r, rtol=1e-10)
    np.testing.assert_allclose(out.transmittance, whole.s_t + whole.e, rtol=1e-10)


def test_lateral_spread_is_symmetric_doubly_stochastic(x64):
    tau = _fields(3, (9, 9))
    u, v = _fields(4, (9, 9)), _fields(5, (9, 9))
    bu = rt.lateral_spread(u, tau, 1.5)
    assert float(bu.sum()) == pytest.approx(float(u.sum()), rel=1e-13)
    assert float(jnp.vdot(bu, v)) == pytest.approx(
        float(jnp.vdot(u, rt.lateral_spread(v, tau, 1.5))), rel=1e-12
    )
    np.testing.assert_allclose(rt.lateral_spread(jnp.ones((9, 9)), tau, 1.5), 1.0, rtol=1e-13)
    assert float(bu.min()) >= 0 and float(jnp.abs(bu - u).max()) > 1e-3


def test_gradients_and_jacfwd(x64):
    sigma = _fields(6, (2, 5, 5), 0.2, 3.0)
    weights = _fields(7, (2, 5, 5), -1.0, 1.0)

    def loss(s):
        return jnp.sum(weights * rt.solve(s, albedo=0.85, asymmetry=0.5, spread=1.0))

    jax.test_util.check_grads(loss, (sigma,), order=1, modes=("rev",), eps=1e-5, atol=1e-7, rtol=1e-5)
    f = lambda s: rt.solve(s, spread=1.0).ravel()  # noqa: E731
    jac = jax.jacfwd(f)(sigma)
    d = _fields(8, (2, 5, 5), -1.0, 1.0)
    fd = (f(sigma + 1e-6 * d) - f(sigma - 1e-6 * d)) / 2e-6
    np.testing.assert_allclose(jnp.tensordot(jac, d, axes=3), fd, rtol=1e-5, atol=1e-9)


def test_jit_vmap_agree():
    sigma = jnp.stack([_fields(9, (2, 6, 6)), _fields(10, (2, 6, 6))]).astype(jnp.float32)
    batched = jax.jit(jax.vmap(rt.solve))(sigma)
    np.testing.assert_allclose(batched[1], rt.solve(sigma[1]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("value", [-0.1, np.nan, np.inf])
def test_bad_extinction_is_named(value):
    sigma = np.ones((2, 4, 4))
    sigma[1, 2, 3] = value
    with pytest.raises(ValueError, match="sigma"):
        rt.solve(sigma)
    with pytest.raises(Exception, match="sigma"):
        jax.jit(rt.solve)(jnp.asarray(sigma))


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="albedo"):
        rt.solve(np.ones((2, 4, 4)), albedo=1.2)
    with pytest.raises(ValueError, match="mu0"):
        rt.solve(np.ones((2, 4, 4)), mu0=0.0)
    with pytest.raises(ValueError, match=r"sigma: expected shape \(2, H, W\)"):
        rt.solve(np.ones((3, 4, 4)))
