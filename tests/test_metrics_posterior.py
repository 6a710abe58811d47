"""Posterior-matching metrics: floors, monotonicity, closed forms, weights, reference libraries."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import ot
import pytest
import scipy.stats

from posteriorjax.metrics import posterior as P


def _rng(key):
    """NumPy generator seeded from a JAX key: test data without compiling JAX's PRNG for every shape."""
    return np.random.default_rng(np.asarray(jr.key_data(key)))


def _fields(key, n, c=1, h=16, w=16):
    return jnp.asarray(_rng(key).normal(size=(n, c, h, w)))


METRICS = {
    "mean": P.mean_error,
    "std": P.std_error,
    "mmd": P.mmd,
    "swd": lambda x, y, w=None: P.sliced_wasserstein(x, y, w, field_stats=(0.0, 1.0)),
    "spectral": P.spectral_error,
}


@pytest.mark.parametrize("name", sorted(METRICS))
def test_identical_ensembles_floor_and_monotone_growth(key, name):
    fn = METRICS[name]
    base = _fields(key, 24) + 1.0
    floor = 1e-10 if name == "spectral" else 0.0
    assert float(fn(base, base)) == pytest.approx(floor, abs=1e-6)
    # shift (mean, mmd, swd) or scale (std, spectral) errors of growing size
    if name in ("std", "spectral"):
        vals = [float(fn(base * (1 + s), base)) for s in (0.05, 0.2, 0.5, 1.0)]
    else:
        vals = [float(fn(base + s, base)) for s in (0.05, 0.2, 0.5, 1.0)]
    assert all(b > a for a, b in zip(vals, vals[1:], strict=False)), vals
    assert vals[0] > floor


def test_mean_and_std_closed_forms(key, x64):
    x = _fields(key, 10, h=8, w=8)
    mu = x.mean(0)
    assert float(P.mean_error(x + 0.5, x)) == pytest.approx(0.5 * 8 / float(jnp.linalg.norm(mu)), rel=1e-10)
    assert float(P.std_error(3.0 * (x - mu) + mu, x)) == pytest.approx(2.0, rel=1e-10)


def test_spectral_error_pure_scale_closed_form(key, x64):
    x = _fields(key, 6, c=2, h=16, w=12)
    for a in (0.5, 1.5, 3.0):
        assert float(P.spectral_error(a * x, x)) == pytest.approx(abs(a**2 - 1), rel=1e-8)


def test_spectral_dc_options(key):
    # float32 zero-mean fields: the reference DC power is round-off, yet above the 1e-10 validity cut
    x = 100.0 * _fields(key, 8)
    x = x - x.mean(axis=(-2, -1), keepdims=True)
    y = x + 1e-3
    _, _, s_ref = P.spectral_errors(y, x)
    assert bool(P.dc_is_roundoff(s_ref)) and float(s_ref[0, 0]) > 1e-10
    auto = float(P.spectral_error(y, x, include_dc="auto"))
    assert auto == pytest.approx(float(P.spectral_error(y, x, include_dc=False)))
    assert float(P.spectral_error(y, x, include_dc=True)) > 1.1 * auto
    _, _, s_ref = P.spectral_errors(x + 5.0, x + 5.0)
    assert not bool(P.dc_is_roundoff(s_ref))
    with pytest.raises(ValueError, match="include_dc"):
        P.spectral_error(x, x, include_dc="yes")


def test_spectral_matches_published_numpy_definition(key, x64):
    x, y = _fields(key, 5, h=16, w=20), 2.0 + _fields(jr.fold_in(key, 1), 7, h=16, w=20)
    wy = np.asarray(jnp.asarray(_rng(jr.fold_in(key, 2)).dirichlet(np.ones(7))))

    def radial(f):
        h, w = f.shape
        p = np.abs(np.fft.fftshift(np.fft.fft2(f))) ** 2
        fy, fx = np.meshgrid(
            np.fft.fftshift(np.fft.fftfreq(h)), np.fft.fftshift(np.fft.fftfreq(w)), indexing="ij"
        )
        r = np.sqrt(fx**2 + fy**2)
        step = 1.0 / min(h, w)
        bins = np.arange(0, 0.5 + step, step)
        idx = np.digitize(r, bins) - 1
        nb = len(bins) - 1
        keep = (idx >= 0) & (idx < nb)
        s = np.bincount(idx[keep], p[keep], nb)
        c = np.bincount(idx[keep], minlength=nb)
        return s / np.maximum(c, 1)

    sg = np.mean([radial(np.asarray(f[0])) for f in x], axis=0)
    sr = np.sum([wi * radial(np.asarray(f[0])) for wi, f in zip(wy, y, strict=True)], axis=0)
    e = np.abs(sg - sr) / (np.abs(sr) + 1e-10)
    ok = np.isfinite(e) & (sr > 1e-10)
    expected = np.exp(np.mean(np.log(e[ok] + 1e-10)))
    assert float(P.spectral_error(x, y, wy)) == pytest.approx(expected, rel=1e-10)


def test_weighted_equals_duplicated(key, x64):
    y = _fields(key, 6, h=8, w=8)
    x = _fields(jr.fold_in(key, 1), 9, h=8, w=8) + 0.3
    counts = np.array([1, 3, 2, 1, 4, 1])
    w = counts / counts.sum()
    dup = jnp.repeat(y, counts, axis=0)
    # MMD's median bandwidth is the unweighted median over pairs (published definition), so the
    # weighted and duplicated forms agree for a given bandwidth
    fns = METRICS | {"mmd": lambda a, b, w=None: P.mmd(a, b, w, bandwidth=100.0)}
    for name, fn in fns.items():
        a, b = float(fn(x, y, w)), float(fn(x, dup))
        assert a == pytest.approx(b, rel=1e-9), name


def test_mmd_matches_numpy_reference(key, x64):
    x = np.asarray(_fields(key, 7, h=6, w=6)).reshape(7, -1)
    y = np.asarray(_fields(jr.fold_in(key, 1), 5, h=6, w=6)).reshape(5, -1) + 0.4
    wy = np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    wx = np.full(7, 1 / 7)

    def d2(a, b):
        return np.maximum((a**2).sum(1)[:, None] + (b**2).sum(1)[None] - 2 * a @ b.T, 0)

    med = np.median(d2(x, y))

    def k(d):
        return np.mean([np.exp(-d / (s * med)) for s in (0.2, 0.5, 1, 2, 5)], axis=0)

    m2 = wx @ k(d2(x, x)) @ wx + wy @ k(d2(y, y)) @ wy - 2 * wx @ k(d2(x, y)) @ wy
    got = P.mmd(x.reshape(7, 1, 6, 6), y.reshape(5, 1, 6, 6), wy)
    assert float(got) == pytest.approx(np.sqrt(max(m2, 0)), rel=1e-10)


def test_mmd_closed_form_between_gaussians(x64):
    # Gauss-Hermite quadrature turns the V-statistic into the population MMD
    nodes, gw = np.polynomial.hermite_e.hermegauss(60)
    gw = gw / gw.sum()
    h, mu, sigma = 2.0, 0.7, 1.0
    x = (sigma * nodes)[:, None]
    y = (mu + sigma * nodes)[:, None]
    got = float(P.mmd(x, y, gw, weights=gw, bandwidth=h))

    def ek(delta, var, gamma):  # E exp(-(X - Y)^2 / gamma), X - Y ~ N(delta, var)
        return (1 + 2 * var / gamma) ** -0.5 * np.exp(-(delta**2) / (gamma + 2 * var))

    m2 = np.mean([ek(0, 2 * sigma**2, s * h) * 2 - 2 * ek(mu, 2 * sigma**2, s * h) for s in P.MMD_SCALES])
    assert got == pytest.approx(np.sqrt(m2), rel=1e-6)


def test_wasserstein_1d_against_scipy_and_shift(key, x64):
    k1, k2, k3, k4 = jr.split(key, 4)
    u, v = jnp.asarray(_rng(k1).normal(size=(13,))), 2 * jnp.asarray(_rng(k2).normal(size=(9,))) + 0.5
    a, b = jnp.asarray(_rng(k3).dirichlet(np.ones(13))), jnp.asarray(_rng(k4).dirichlet(np.ones(9)))
    ref = scipy.stats.wasserstein_distance(u, v, a, b)
    assert float(P.wasserstein_1d(u, v, a, b)) == pytest.approx(ref, rel=1e-10)
    assert float(P.wasserstein_1d(u, u + 1.7)) == pytest.approx(1.7, rel=1e-10)
    assert float(P.wasserstein_1d(jnp.zeros(3), jnp.zeros(5))) == 0.0


@pytest.mark.parametrize("network", [False, True], ids=["counting", "sorting_network"])
def test_sliced_wasserstein_against_pot_same_directions(key, x64, network, monkeypatch):
    from posteriorjax.metrics import ordering

    if network:  # the projections' argsort through the sorting network (float64: int64 keys)
        monkeypatch.setattr(ordering, "NETWORK_MIN_PAYLOAD", 0)
    jax.clear_caches()  # `_sliced_wasserstein` is jitted: traced afresh with the threshold set
    x = _fields(key, 11, h=8, w=8) * 2 + 7.0
    y = _fields(jr.fold_in(key, 1), 13, h=8, w=8) * 3 + 6.0
    wy = np.asarray(jnp.asarray(_rng(jr.fold_in(key, 2)).dirichlet(np.ones(13))))
    dirs = P.grf_directions((8, 8), 32)
    got = float(P.sliced_wasserstein(x, y, wy, field_stats=(7.5, 4.5), directions=dirs))
    xs = (np.asarray(x).reshape(11, -1) - 7.5) / 4.5
    ys = (np.asarray(y).reshape(13, -1) - 7.5) / 4.5
    ref = ot.sliced_wasserstein_distance(
        xs, ys, np.full(11, 1 / 11), wy, p=1, projections=dirs.reshape(32, -1).T
    )
    jax.clear_caches()
    assert got == pytest.approx(float(ref), rel=1e-8)


def test_sliced_wasserstein_pure_shift_closed_form(key, x64):
    x = _fields(key, 10, h=8, w=8)
    dirs = P.grf_directions((8, 8), 16)
    got = float(P.sliced_wasserstein(x + 0.3, x, field_stats=(0.0, 2.0), directions=dirs))
    assert got == pytest.approx(np.mean(np.abs(0.15 * dirs.sum(axis=(1, 2)))), rel=1e-10)


def test_default_directions_are_the_published_seed0_ones(x64):
    d = P.grf_directions((8, 12), 4)
    assert d.shape == (4, 8, 12)
    np.testing.assert_allclose(np.linalg.norm(d.reshape(4, -1), axis=1), 1.0, rtol=1e-10)
    np.testing.assert_allclose(d.reshape(4, -1).sum(1), 0.0, atol=1e-10)  # zero-mean mode removed
    noise = np.random.default_rng(0).normal(size=(4, 8, 12))
    np.testing.assert_allclose(P.grf_directions_from_noise(jnp.asarray(noise)), d, atol=1e-12)
    assert P.grf_directions((8, 12), 4) is d  # cached


def test_pointwise_relative_l2(key):
    t = _fields(key, 1)[0]
    x = jnp.stack([t, 2 * t, t + 1])
    rel = P.relative_l2(x, t)
    np.testing.assert_allclose(rel[:2], [0.0, 1.0], atol=1e-6)
    assert float(P.mean_relative_l2(x[:2], t)) == pytest.approx(0.5, rel=1e-5)
    # one target per member: a batch of predictions against its targets
    targets = jnp.stack([t, t + 1, 3 * t])
    xn, tn = np.asarray(x, np.float64).reshape(3, -1), np.asarray(targets, np.float64).reshape(3, -1)
    expected = np.linalg.norm(xn - tn, axis=1) / np.linalg.norm(tn, axis=1)
    np.testing.assert_allclose(P.relative_l2(x, targets), expected, rtol=1e-5)
    with pytest.raises(ValueError, match="truth: expected shape"):
        P.relative_l2(x, targets[:2])


def test_jit_vmap_over_cases(key):
    x = _fields(key, 3 * 8).reshape(3, 8, 1, 16, 16)
    y = x + 0.1
    fn = jax.jit(jax.vmap(lambda a, b: P.sliced_wasserstein(a, b, field_stats=(0.0, 1.0))))
    out = fn(x, y)
    assert out.shape == (3,)
    np.testing.assert_allclose(out[1], P.sliced_wasserstein(x[1], y[1], field_stats=(0.0, 1.0)), rtol=1e-5)


def test_bad_inputs(key):
    x = _fields(key, 4)
    with pytest.raises(ValueError, match="ref_samples.*members of shape"):
        P.mean_error(x, x[:, :, :8])
    with pytest.raises(ValueError, match="ref_weights.*>= 0"):
        P.mmd(x, x, jnp.array([0.5, 0.6, 0.2, -0.3]))
    with pytest.raises(ValueError, match="ref_weights.*sum"):
        P.mmd(x, x, jnp.full(4, 0.3))
    with pytest.raises(ValueError, match="ref_weights.*finite"):
        P.mmd(x, x, jnp.array([jnp.nan, 0.5, 0.25, 0.25]))
    with pytest.raises(ValueError, match=r"ref_weights: expected shape \(4,\)"):
        P.mmd(x, x, jnp.full(3, 1 / 3))
    with pytest.raises(ValueError, match="samples: expected at least 2"):
        P.std_error(x[:1], x)
    with pytest.raises(ValueError, match="samples: expected finite"):
        P.mean_error(x.at[0, 0, 0, 0].set(jnp.inf), x)


def test_nonfinite_samples_under_jit_give_nan(key):
    x = _fields(key, 4)
    bad = x.at[1, 0, 2, 2].set(jnp.nan)
    for name, fn in METRICS.items():
        assert np.isnan(jax.jit(fn)(bad, x)), name
    with pytest.raises(Exception, match="weights"):
        jax.jit(P.mmd)(x, x, jnp.full(4, 0.3))
