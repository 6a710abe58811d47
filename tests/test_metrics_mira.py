"""MIRA: exact calibrated moments, the over/under-confident toy of the MIRA paper, options, bad input."""

import functools

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.scipy.stats import norm

from posteriorjax.metrics import mira as M


def _rng(key):
    """NumPy generator seeded from a JAX key: test data without compiling JAX's PRNG for every shape."""
    return np.random.default_rng(np.asarray(jr.key_data(key)))


def test_expected_moments_formulas():
    mean, var = M.expected_moments(100)
    assert mean == pytest.approx(203 / 306)
    assert var == pytest.approx(101 / 204 - (203 / 306) ** 2)
    mean, var = M.expected_moments(10**7)
    assert mean == pytest.approx(2 / 3, abs=1e-6) and var == pytest.approx(1 / 18, abs=1e-6)


def _toy(key, num=1000, n=500):
    """MIRA paper Sec. 5.1: theta ~ U([-5, 5]^2), log sigma_i ~ U(-5, -1), candidate N(theta, Sigma)."""
    k1, k2, k3, k4 = jr.split(key, 4)
    theta = jnp.asarray(_rng(k1).uniform(-5.0, 5.0, size=(num, 2)))
    sigma = jnp.exp(jnp.asarray(_rng(k2).uniform(-5.0, -1.0, size=(num, 2))))
    cand = theta[:, None] + sigma[:, None] * jnp.asarray(_rng(k3).normal(size=(num, n, 2)))
    z = jnp.asarray(_rng(k4).normal(size=(num, 2)))
    return theta, sigma, cand, z


def test_mira_toy_calibrated_over_under_biased(key):
    theta, sigma, cand, z = _toy(key)
    bias = jnp.sign(theta) * norm.ppf(jnp.abs(theta) / 5.0) * sigma  # Z(1 - |theta| / 5) sigma, Z = isf
    scenarios = {
        "calibrated": (cand, theta + sigma * z),
        "overconfident": (cand, theta + jnp.sqrt(3.0) * sigma * z),
        "underconfident": (cand, theta + jnp.sqrt(0.5) * sigma * z),
        "biased": (cand - bias[:, None], theta + sigma * z),
    }
    samples = jnp.stack([s for s, _ in scenarios.values()])
    truths = jnp.stack([t for _, t in scenarios.values()])
    run = jax.jit(jax.vmap(functools.partial(M.mira, num_bootstrap=200), in_axes=(None, 0, 0)))
    res = run(jr.fold_in(key, 7), samples, truths)
    score = dict(zip(scenarios, np.asarray(res.score), strict=True))
    mean, se = float(res.expected_mean[0]), float(res.standard_error[0])
    assert mean == pytest.approx(M.expected_moments(499)[0], rel=1e-6)
    assert abs(score["calibrated"] - mean) < 3 * se, score
    assert score["overconfident"] < mean - 3 * se, score
    assert score["underconfident"] > mean + 3 * se, score
    assert score["biased"] < mean - 3 * se, score
    assert np.all(np.asarray(res.bootstrap_std) > 0) and np.all(np.asarray(res.bootstrap_std) < se)


def test_single_region_statistic_has_exact_variance(key):
    # one region per condition: per-condition values are single statistics with the exact moments
    k1, k2 = jr.split(key)
    samples = jnp.asarray(_rng(k1).normal(size=(4000, 11, 3)))
    truth = jnp.asarray(_rng(k2).normal(size=(4000, 3)))
    res = M.mira(jr.fold_in(key, 1), samples, truth, num_regions=1)
    mean, var = M.expected_moments(10)
    assert res.num_counted == 10
    vals = np.asarray(res.per_condition)
    assert np.all(np.isin(np.round(vals * 12).astype(int), np.arange(1, 12)))
    assert vals.mean() == pytest.approx(mean, abs=3 * np.sqrt(var / 4000))
    assert vals.var() == pytest.approx(var, rel=0.1)


def test_fields_equal_flat_vectors_and_anchored_centres(key):
    k1, k2, k3 = jr.split(key, 3)
    theta = jnp.asarray(_rng(k1).uniform(-5.0, 5.0, size=(300, 4)))
    blind = jnp.asarray(_rng(k2).uniform(-5.0, 5.0, size=(300, 100, 4)))  # ignores the condition
    truth = theta + 0.3 * jnp.asarray(_rng(k3).normal(size=(300, 4)))
    flat = M.mira(key, blind, truth, num_regions=20)
    field = M.mira(key, blind.reshape(300, 100, 1, 2, 2), truth.reshape(300, 1, 2, 2), num_regions=20)
    np.testing.assert_allclose(flat.score, field.score, rtol=1e-6)
    # uniform centres are blind to a data-independent candidate; condition-dependent centres are not
    assert abs(float(flat.score) - float(flat.expected_mean)) < 4 * float(flat.standard_error)
    anchored = M.mira(key, blind, truth, num_regions=20, center_anchors=theta)
    assert float(anchored.score) < 0.55


def test_mira_bad_inputs(key):
    x = jnp.asarray(_rng(key).normal(size=(5, 4, 2)))
    with pytest.raises(ValueError, match="N >= 2"):
        M.mira(key, x[:, :1], x[:, 0])
    with pytest.raises(ValueError, match="truth: expected"):
        M.mira(key, x, x[:4, 0])
    with pytest.raises(ValueError, match="samples: expected finite"):
        M.mira(key, x.at[0, 0, 0].set(jnp.nan), x[:, 0])
    with pytest.raises(ValueError, match=r"samples: expected \(L, N, d\)"):
        M.mira(key, x[0], x[0, 0])
    res = jax.jit(M.mira)(key, x.at[0, 0, 0].set(jnp.inf), x[:, 0])
    assert np.isnan(res.score) and np.isnan(res.z)


def test_condition_statistic_is_mira_per_condition(key):
    k1, k2 = jr.split(key)
    samples = jnp.asarray(_rng(k1).normal(size=(3, 9, 1, 2, 2)), jnp.float32)
    truth = jnp.asarray(_rng(k2).normal(size=(3, 1, 2, 2)), jnp.float32)
    res = M.mira(key, samples, truth, num_regions=30, num_bootstrap=10)
    region_key = jr.split(key)[0]
    keys = jax.vmap(lambda i: jr.fold_in(region_key, i))(jnp.arange(3))
    one = jax.jit(jax.vmap(functools.partial(M.condition_statistic, num_regions=30)))
    np.testing.assert_allclose(one(keys, samples, truth), res.per_condition, rtol=1e-6)
    broken = one(keys, samples.at[1, 2].set(jnp.inf), truth)  # the same compiled program
    assert np.isnan(broken[1]) and np.all(np.isfinite(broken[::2]))
    with pytest.raises(ValueError, match="N >= 2"):
        M.condition_statistic(key, samples[0, :1], truth[0])
    with pytest.raises(ValueError, match="truth: expected 4 elements"):
        M.condition_statistic(key, samples[0], truth[0, 0, 0])
    with pytest.raises(ValueError, match=r"samples: expected \(N, d\)"):
        M.condition_statistic(key, samples[0, 0, 0, 0], truth[0])
    with pytest.raises(ValueError, match="center_anchor: expected 4 elements"):
        M.condition_statistic(key, samples[0], truth[0], center_anchor=truth[0, 0, 0])


def test_distances_match_scipy_cdist(key):
    from scipy.spatial.distance import cdist

    k1, k2 = jr.split(key)
    c = np.asarray(_rng(k1).uniform(size=(7, 5)))
    x = np.asarray(_rng(k2).uniform(size=(11, 5)))
    cases = {
        "l2": (cdist(c, x, "sqeuclidean"), {}),
        "l1": (cdist(c, x, "cityblock"), {}),
        "chebyshev": (cdist(c, x, "chebyshev"), {}),
        "cosine": (cdist(c, x, "cosine"), {}),
        "minkowski": (cdist(c, x, "minkowski", p=2.5) ** 2.5, {"minkowski_p": 2.5}),
    }
    for name, (expected, extra) in cases.items():
        got = M._distances(jnp.asarray(c), jnp.asarray(x), M.options(distance=name, **extra))
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6, err_msg=name)


@pytest.mark.slow
def test_null_is_calibrated_for_every_distance_and_centre_distribution(key):
    # with_truth normalization keeps the null exact for any region construction
    k1, k2 = jr.split(key)
    samples = jnp.asarray(_rng(k1).normal(size=(1500, 30, 3)), jnp.float32)
    truth = jnp.asarray(_rng(k2).normal(size=(1500, 3)), jnp.float32)
    settings = [{"distance": d} for d in M.DISTANCES] + [
        {"centres": "normal"},
        {"centres": "beta"},
        {"centres": "uniform", "centre_params": (-10.0, 10.0)},
        {"centres": "normal", "centre_params": (-5.0, 1.0)},
    ]
    for opts in settings:
        res = M.mira(
            key, samples, truth, num_regions=10, num_bootstrap=200, normalization="with_truth", **opts
        )
        assert abs(float(res.z_bootstrap)) < 4, (opts, float(res.score), float(res.z_bootstrap))


def test_bootstrap_std_matches_spread_over_independent_draws(key):
    # calibrated toy: 100 independent data sets; the score's spread over them vs the mean bootstrap std
    reps, num, n = 100, 200, 40
    k1, k2 = jr.split(key)
    samples = jnp.asarray(_rng(k1).normal(size=(reps, num, n, 2)), jnp.float32)
    truth = jnp.asarray(_rng(k2).normal(size=(reps, num, 2)), jnp.float32)
    run = jax.jit(jax.vmap(functools.partial(M.mira, num_regions=20, num_bootstrap=300)))
    res = run(jr.split(key, reps), samples, truth)
    spread = float(np.std(np.asarray(res.score), ddof=1))
    boot = float(np.mean(np.asarray(res.bootstrap_std)))
    assert boot == pytest.approx(spread, rel=0.2), (boot, spread)
    assert float(res.standard_error[0]) > 2 * spread  # the single-region band is far too wide


def _uninformative(key, num=200, n=500):
    """MIRA App. E.4 (TARP paper Sec. 4.3): y ~ N(0, 1), x ~ N(y, 0.1^2); exact posterior vs the prior."""
    k1, k2, k3, k4 = jr.split(key, 4)
    y = _rng(k1).normal(size=(num, 1))
    x = y + 0.1 * _rng(k2).normal(size=(num, 1))
    var = 0.01 / 1.01
    exact = x[:, None] / 1.01 + np.sqrt(var) * _rng(k3).normal(size=(num, n, 1))
    prior = _rng(k4).normal(size=(num, n, 1))
    return jnp.asarray(y), jnp.asarray(x), jnp.asarray(exact), jnp.asarray(prior)


def test_observation_dependent_centres_catch_the_prior_as_posterior(key):
    y, x, exact, prior = _uninformative(key)
    blind = M.mira(key, prior, y)
    caught = M.mira(key, prior, y, center_anchors=x)  # c = x* + U(-0.05, 0.05), data units
    passed = M.mira(key, exact, y, center_anchors=x)
    assert abs(float(blind.z_bootstrap)) < 3, float(blind.z_bootstrap)
    assert float(caught.z_bootstrap) < -4 and float(caught.score) == pytest.approx(0.54, abs=0.02)
    assert abs(float(passed.z_bootstrap)) < 3.5, float(passed.z_bootstrap)
    with pytest.raises(ValueError, match="anchor_half_width"):
        M.mira(key, prior, y, center_anchors=x, anchor_half_width=0.0)


def test_sufficient_statistic_is_beta_2_1_under_the_null(key):
    import scipy.stats

    k1, k2, k3 = jr.split(key, 3)
    num, n = 4000, 400
    samples = jnp.asarray(_rng(k1).normal(size=(num, n, 2)), jnp.float32)
    keys = jr.split(k3, num)
    region = jax.jit(jax.vmap(functools.partial(M.region_statistics, num_regions=1)))
    truth = jnp.asarray(_rng(k2).normal(size=(num, 2)), jnp.float32)
    s, k = region(keys, samples, truth)
    q = np.asarray(s[:, 0])[np.asarray(k[:, 0])]
    assert 1800 < q.size < 2200  # P(k = 1) = 1/2 under the null
    assert scipy.stats.kstest(q, scipy.stats.beta(2, 1).cdf).pvalue > 0.01
    # an under-confident candidate (truth at half its spread) is rejected at this size
    s, k = region(keys, samples, 0.5 * truth)
    q = np.asarray(s[:, 0])[np.asarray(k[:, 0])]
    assert scipy.stats.kstest(q, scipy.stats.beta(2, 1).cdf).pvalue < 0.01
    res = M.mira(key, samples[:1000, :200], truth[:1000], variant="sufficient", num_bootstrap=200)
    assert abs(float(res.z_bootstrap)) < 4, float(res.z_bootstrap)


def test_option_errors(key):
    x = jnp.asarray(_rng(key).normal(size=(5, 4, 2)))
    for kwargs, match in (
        ({"normalization": "all"}, "normalization: expected"),
        ({"distance": "l3"}, "distance: expected"),
        ({"distance": "minkowski", "minkowski_p": 0.5}, "minkowski_p"),
        ({"centres": "gamma"}, "centres: expected"),
        ({"centres": "uniform", "centre_params": (1.0, 0.0)}, "low < high"),
        ({"variant": "both"}, "variant: expected"),
    ):
        with pytest.raises(ValueError, match=match):
            M.mira(key, x, x[:, 0], **kwargs)
