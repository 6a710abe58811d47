"""TARP expected coverage (against the tarp package where its flaws do not bite) and SBC on projections."""

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats

tarp_pkg = pytest.importorskip("tarp")

from posteriorjax.metrics import calibration as C  # noqa: E402


def _rng(key):
    """NumPy generator seeded from a JAX key: test data without compiling JAX's PRNG for every shape."""
    return np.random.default_rng(np.asarray(jr.key_data(key)))


def _gaussian_posterior(key, num, n, d, *, truth_scale=1.0):
    """Calibrated when truth_scale = 1: theta ~ U(0.2, 0.8)^d, truth and samples ~ N(theta, 0.05^2)."""
    k1, k2, k3 = jr.split(key, 3)
    theta = jnp.asarray(_rng(k1).uniform(0.2, 0.8, size=(num, d)))
    samples = theta[:, None] + 0.05 * jnp.asarray(_rng(k2).normal(size=(num, n, d)))
    truth = theta + truth_scale * 0.05 * jnp.asarray(_rng(k3).normal(size=(num, d)))
    return samples, truth


def test_matches_tarp_package_unnormalized_with_given_references(key, x64):
    samples, truth = _gaussian_posterior(key, 1000, 101, 3)
    np.random.seed(3)
    refs = np.random.uniform(size=(1000, 3))
    s_np = np.asarray(jnp.swapaxes(samples, 0, 1))
    ecp_ref, alpha_ref = tarp_pkg.get_tarp_coverage(
        s_np, np.asarray(truth), references=refs.copy(), norm=False
    )
    ecp, alpha = C.tarp(key, samples, truth, references=refs, normalize=None)
    np.testing.assert_allclose(
        alpha, alpha_ref, atol=1e-12
    )  # the package bins over [min f, max f] = [0, 1] here
    np.testing.assert_allclose(ecp, ecp_ref, atol=1e-12)


def test_matches_tarp_package_normalized_random_references(key, x64):
    samples, truth = _gaussian_posterior(key, 1000, 101, 2)
    s_np, t_np = np.asarray(jnp.swapaxes(samples, 0, 1)), np.asarray(truth)
    ecp_ref, _ = tarp_pkg.get_tarp_coverage(s_np, t_np, norm=True, seed=11)
    np.random.seed(11)
    u = np.random.uniform(size=(1000, 2))
    low, high = t_np.min(0), t_np.max(0)
    refs = low + u * (high - low + 1e-10)  # the same reference points, given in the data space
    ecp, _ = C.tarp(key, samples, truth, references=refs, normalize="truth")
    np.testing.assert_allclose(ecp, ecp_ref, atol=2e-3)


def test_ecp_diagonal_when_calibrated_and_signs_of_miscalibration(key):
    summaries = {}
    for name, scale in (("calibrated", 1.0), ("over", 2.0), ("under", 0.5)):
        samples, truth = _gaussian_posterior(jr.fold_in(key, 1), 2000, 100, 3, truth_scale=scale)
        ecp, alpha = C.tarp(jr.fold_in(key, 2), samples, truth)
        assert ecp.shape == alpha.shape == (201,)
        summaries[name] = {k: float(v) for k, v in C.tarp_summary(ecp, alpha).items()}
    assert summaries["calibrated"]["ks"] < 0.05 and abs(summaries["calibrated"]["atc"]) < 0.02
    assert summaries["over"]["atc"] < -0.05 and summaries["over"]["ks"] > 0.1
    assert summaries["under"]["atc"] > 0.02 and summaries["under"]["ks"] > 0.05


def test_bootstrap_resamples_freshly(key):
    samples, truth = _gaussian_posterior(key, 300, 50, 2)
    boot, alpha = C.tarp_bootstrap(key, samples, truth, num_bootstrap=40)
    assert boot.shape == (40, alpha.shape[0])
    assert len({tuple(np.round(np.asarray(row), 6)) for row in boot}) == 40  # every iteration differs
    ecp, _ = C.tarp(jr.fold_in(key, 5), samples, truth)
    assert np.max(np.abs(np.asarray(boot.mean(0) - ecp))) < 0.08
    again, _ = C.tarp_bootstrap(key, samples, truth, num_bootstrap=40)
    np.testing.assert_array_equal(boot, again)  # reproducible from the key
    refs = np.asarray(truth)
    boot_refs, _ = C.tarp_bootstrap(key, samples, truth, num_bootstrap=5, references=refs)
    assert boot_refs.shape == (5, alpha.shape[0])


def test_tarp_bad_inputs(key):
    samples, truth = _gaussian_posterior(key, 20, 10, 2)
    with pytest.raises(ValueError, match="truth: expected"):
        C.tarp(key, samples, truth[:10])
    with pytest.raises(ValueError, match="normalize"):
        C.tarp(key, samples, truth, normalize="minmax")
    with pytest.raises(ValueError, match="metric"):
        C.tarp(key, samples, truth, metric="cosine")


def test_ks_uniform_against_scipy(key, x64):
    u = jnp.asarray(_rng(key).uniform(size=(300,)))
    d, p = C.ks_uniform(u)
    ref = scipy.stats.kstest(np.asarray(u), "uniform", method="asymp")
    assert float(d) == pytest.approx(ref.statistic, rel=1e-10)
    assert float(p) == pytest.approx(ref.pvalue, abs=0.02)


def test_sbc_projections_detect_miscalibration(key):
    samples, truth = _gaussian_posterior(key, 1000, 63, 4)
    calibrated = C.sbc_test(jr.fold_in(key, 1), samples, truth, num_projections=8)
    assert calibrated["ranks"].shape == (8, 1000)
    assert int(calibrated["ranks"].max()) <= 63
    assert float(calibrated["min_p_value"]) > 1e-3
    samples, truth = _gaussian_posterior(key, 1000, 63, 4, truth_scale=2.0)
    over = C.sbc_test(jr.fold_in(key, 1), samples, truth, num_projections=8)
    assert float(over["min_p_value"]) < 1e-6


def test_summary_reading_on_the_mira_toy(key):
    """MIRA paper Sec. 5.1 toy: over- and under-confidence give S-shaped curves, atc ~ 0; ks detects them.

    atc = 1/2 - mean(f) up to the binning (the documented reading), whatever the posterior.
    """
    from scipy.stats import norm

    k1, k2, k3, k4 = jr.split(key, 4)
    num, n = 1000, 500
    theta = _rng(k1).uniform(-5.0, 5.0, size=(num, 2))
    sigma = np.exp(_rng(k2).uniform(-5.0, -1.0, size=(num, 2)))
    cand = theta[:, None] + sigma[:, None] * _rng(k3).normal(size=(num, n, 2))
    z = _rng(k4).normal(size=(num, 2))
    bias = np.sign(theta) * norm.isf(1 - np.abs(theta) / 5.0) * sigma
    scenarios = {
        "calibrated": (cand, theta + sigma * z),
        "over": (cand, theta + np.sqrt(3.0) * sigma * z),
        "under": (cand, theta + np.sqrt(0.5) * sigma * z),
        "biased": (cand - bias[:, None], theta + sigma * z),
    }
    out = {}
    for name, (s, t) in scenarios.items():
        s, t = jnp.asarray(s, jnp.float32), jnp.asarray(t, jnp.float32)
        ecp, alpha = C.tarp(jr.fold_in(key, 1), s, t, num_alpha_bins=50)
        out[name] = {k: float(v) for k, v in C.tarp_summary(ecp, alpha).items()}
        low, high = t.min(0), t.max(0)
        refs = jr.uniform(jr.fold_in(key, 1), t.shape, t.dtype)  # tarp's own draw in the unit box
        w = high - low + 1e-10
        f = C.tarp_credibility((s - low) / w, (t - low) / w, refs)
        assert out[name]["atc"] == pytest.approx(0.5 - float(f.mean()), abs=1.5 / 50)
    assert out["calibrated"]["ks"] < 0.055, out
    for name in ("over", "under"):
        assert abs(out[name]["atc"]) < 0.02 and out[name]["ks"] > 0.065, (name, out[name])
    assert out["biased"]["ks"] > 0.065, out


def test_observation_references_catch_the_prior_as_posterior(key):
    """MIRA App. E.4 / TARP Sec. 4.3: prior references miss p(y | x) = p(y), references at x do not."""
    k1, k2, k3, k4 = jr.split(key, 4)
    num, n = 500, 300
    y = _rng(k1).normal(size=(num, 1))
    x = y + 0.1 * _rng(k2).normal(size=(num, 1))
    exact = x[:, None] / 1.01 + np.sqrt(0.01 / 1.01) * _rng(k3).normal(size=(num, n, 1))
    prior = _rng(k4).normal(size=(num, n, 1))
    prior_refs = _rng(jr.fold_in(key, 9)).normal(size=(num, 1))
    obs_refs = C.observation_references(jr.fold_in(key, 8), jnp.asarray(x), 0.5)
    ks = {}
    for name, s in (("exact", exact), ("prior", prior)):
        for rname, refs in (("prior_refs", prior_refs), ("obs_refs", obs_refs)):
            ecp, alpha = C.tarp(key, s, y, references=refs, normalize=None)
            ks[name, rname] = float(C.tarp_summary(ecp, alpha)["ks"])
    assert ks["prior", "prior_refs"] < 0.1 and ks["exact", "prior_refs"] < 0.1, ks
    assert ks["prior", "obs_refs"] > 0.3 and ks["exact", "obs_refs"] < 0.1, ks
    boot, _ = C.tarp_bootstrap(key, prior, y, references=obs_refs, normalize=None, num_bootstrap=50)
    lo, hi = C.tarp_band(boot)
    assert np.all(np.asarray(lo) <= np.asarray(hi)) and float(jnp.max(hi - lo)) < 0.2
    with pytest.raises(ValueError, match="half_width"):
        C.observation_references(key, jnp.asarray(x), jnp.ones(3))
