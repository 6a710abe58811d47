"""Proper scores, coverage, conformal recalibration and marginal fidelity."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import properscoring
import pytest
import scoringrules

from posteriorjax.metrics import calibration as C
from posteriorjax.metrics import scoring as S


def _rng(key):
    """NumPy generator seeded from a JAX key: test data without compiling JAX's PRNG for every shape."""
    return np.random.default_rng(np.asarray(jr.key_data(key)))


def test_crps_against_properscoring_and_scoringrules(key, x64):
    k1, k2, k3 = jr.split(key, 3)
    x = jnp.asarray(_rng(k1).normal(size=(17, 3, 4))) * 2.0 + 1.0
    x = x.at[3].set(x[5])  # ties
    t = jnp.asarray(_rng(k2).normal(size=(3, 4)))
    w = jnp.asarray(_rng(k3).dirichlet(np.ones(17)))
    xn, tn = np.moveaxis(np.asarray(x), 0, -1), np.asarray(t)
    np.testing.assert_allclose(S.crps(x, t), properscoring.crps_ensemble(tn, xn), rtol=1e-10)
    np.testing.assert_allclose(S.crps(x, t), scoringrules.crps_ensemble(tn, xn, estimator="qd"), rtol=1e-10)
    np.testing.assert_allclose(
        S.crps(x, t, estimator="fair"), scoringrules.crps_ensemble(tn, xn, estimator="fair"), rtol=1e-10
    )
    wn = np.broadcast_to(np.asarray(w), xn.shape)
    np.testing.assert_allclose(S.crps(x, t, w), properscoring.crps_ensemble(tn, xn, weights=wn), rtol=1e-8)


def test_crps_single_member_is_mae_and_weighted_equals_duplicated(key, x64):
    x = jnp.asarray(_rng(key).normal(size=(5, 6)))
    t = jnp.linspace(-1, 1, 6)
    np.testing.assert_allclose(S.crps(x[:1], t), jnp.abs(x[0] - t), rtol=1e-12)
    counts = np.array([2, 1, 3, 1, 1])
    np.testing.assert_allclose(
        S.crps(x, t, counts / counts.sum()), S.crps(jnp.repeat(x, counts, axis=0), t), rtol=1e-10
    )


def test_crps_grows_with_shift_and_scale(key):
    x = jnp.asarray(_rng(key).normal(size=(64, 200)))
    t = jnp.asarray(_rng(jr.fold_in(key, 1)).normal(size=(200,)))
    shifts = [float(S.crps(x + s, t).mean()) for s in (0.0, 0.5, 1.0, 2.0)]
    scales = [float(S.crps(x * s, t).mean()) for s in (1.0, 2.0, 4.0)]
    assert all(b > a for a, b in zip(shifts, shifts[1:], strict=False))
    assert all(b > a for a, b in zip(scales, scales[1:], strict=False))


def test_energy_score_against_scoringrules(key, x64):
    x = jnp.asarray(_rng(key).normal(size=(9, 2, 3)))
    t = jnp.asarray(_rng(jr.fold_in(key, 1)).normal(size=(2, 3)))
    xn, tn = np.asarray(x).reshape(9, 6), np.asarray(t).reshape(6)
    assert float(S.energy_score(x, t)) == pytest.approx(float(scoringrules.es_ensemble(tn, xn)), rel=1e-10)
    ref = scoringrules.es_ensemble(tn, xn, estimator="fair")
    assert float(S.energy_score(x, t, estimator="fair")) == pytest.approx(float(ref), rel=1e-10)


def test_scoring_bad_inputs(key):
    x = jnp.asarray(_rng(key).normal(size=(4, 3)))
    with pytest.raises(ValueError, match="truth: expected shape"):
        S.crps(x, jnp.zeros(4))
    with pytest.raises(ValueError, match="samples: expected at least 2"):
        S.crps(x[:1], jnp.zeros(3), estimator="fair")
    with pytest.raises(ValueError, match="estimator"):
        S.crps(x, jnp.zeros(3), estimator="pwm")
    with pytest.raises(ValueError, match="weights.*sum"):
        S.crps(x, jnp.zeros(3), jnp.ones(4))
    assert np.isnan(jax.jit(S.crps)(x.at[0, 0].set(jnp.nan), jnp.zeros(3))).all()


def _gaussian_cases(key, num, n, *, spread=1.0, shift=0.0):
    """Calibrated toy: truth ~ N(m, 1), samples ~ N(m + shift, spread^2) per case, 8 elements each."""
    k1, k2, k3 = jr.split(key, 3)
    m = 3.0 * jnp.asarray(_rng(k1).normal(size=(num, 8)))
    truth = m + jnp.asarray(_rng(k2).normal(size=(num, 8)))
    samples = m[:, None] + shift + spread * jnp.asarray(_rng(k3).normal(size=(num, n, 8)))
    return samples, truth


def test_coverage_calibrated_over_and_under(key):
    levels = jnp.asarray(C.DEFAULT_LEVELS)
    cover = jax.jit(jax.vmap(lambda s, t: C.coverage(s, t)))
    samples, truth = _gaussian_cases(key, 400, 200)
    cov = cover(samples, truth).mean(0)
    assert float(C.calibration_error(cov)) < 0.015
    narrow = cover(
        samples * 0.0 + (samples - samples.mean(1, keepdims=True)) * 0.5 + samples.mean(1, keepdims=True),
        truth,
    )
    assert np.all(np.asarray(narrow.mean(0)) < np.asarray(levels))
    wide = cover(samples * 2.0 - samples.mean(1, keepdims=True), truth)
    assert np.all(np.asarray(wide.mean(0))[2:] > np.asarray(levels)[2:])


def test_conformal_reaches_nominal_on_held_out(key):
    # over-confident ensembles (spread 0.3 instead of 1) recalibrated on 1000 cases, tested on 2000
    samples, truth = _gaussian_cases(key, 3000, 64, spread=0.3)
    cal_x, cal_t, test_x, test_t = (
        samples[:1000, :, :1],
        truth[:1000, :1],
        samples[1000:, :, :1],
        truth[1000:, :1],
    )
    for level in (0.5, 0.8, 0.9):
        raw = jax.vmap(lambda s, t, level=level: C.coverage(s, t, (level,)))(test_x, test_t).mean()
        scale = C.conformal_scale(cal_x, cal_t, level)
        lo, hi = jax.vmap(lambda s, level=level, scale=scale: C.conformal_intervals(s, level, scale))(test_x)
        covered = float(jnp.mean((lo <= test_t) & (test_t <= hi)))
        assert float(raw) < level - 0.2
        # coverage given the calibration draw fluctuates by ~sqrt(l (1 - l) / n_cal), test noise adds n_test
        se = np.sqrt(level * (1 - level) * (1 / 1000 + 1 / 2000))
        assert level - 3 * se <= covered <= level + 1 / 1001 + 3 * se, (level, covered)
    per = C.conformal_scale(samples[:300], truth[:300], 0.9, per_element=True)
    assert per.shape == (8,)


def test_conformal_quantile_finite_sample_rule():
    scores = jnp.arange(1.0, 10.0)  # n = 9
    assert float(C.conformal_quantile(scores, 0.5)) == 5.0  # ceil(10 * 0.5) = 5th smallest
    assert float(C.conformal_quantile(scores, 0.9)) == 9.0
    assert np.isinf(float(C.conformal_quantile(scores, 0.95)))


def test_marginal_fidelity_point_estimates_narrow_the_marginal(key):
    # m ~ N(0, 4), truth | m ~ N(m, 4): Var z = 8 and a posterior-mean point estimate keeps Var m = 4
    rng = _rng(key)
    m = 2.0 * rng.normal(size=(1000, 8))
    truth = jnp.asarray(m + 2.0 * rng.normal(size=m.shape))
    samples = jnp.asarray(m[:, None] + 2.0 * rng.normal(size=(1000, 32, 8)))
    dec = C.variance_decomposition(samples, truth)
    assert float(dec["predicted_ratio"]) == pytest.approx(1.0, abs=0.1)
    assert float(dec["point_ratio"]) == pytest.approx(0.5, abs=0.1)
    assert float(dec["predicted"]) == pytest.approx(float(dec["within"] + dec["between"]), rel=1e-6)
    point = samples.mean(1, keepdims=True)
    w_full, w_point = C.marginal_wasserstein(samples, truth), C.marginal_wasserstein(point, truth)
    assert float(w_point) > 2 * float(w_full)
    edges, ratio = C.histogram_ratio(point, truth, bins=8, value_range=(-8.0, 8.0))
    assert edges.shape == (9,) and ratio.shape == (8,)
    assert float(ratio[0]) < 0.5 and float(ratio[-1]) < 0.5  # tails under-populated by point estimates
    assert float(ratio[3]) > 1.1 and float(ratio[4]) > 1.1  # bulk over-populated


def test_histogram_ratio_error_closed_form_and_numpy(key):
    hre = jax.jit(C.histogram_ratio_error, static_argnames="bins")
    # truth {0, 1, 2, 3} on 3 bins of [0, 3]: masses 1/4, 1/4, 1/2; every prediction at 1.5 (bin 2):
    # 1/4 |0 - 1| + 1/4 |4 - 1| + 1/2 |0 - 1| = 1.5
    t = jnp.asarray([[0.0, 1.0, 2.0, 3.0]])
    assert float(hre(jnp.full((1, 1, 4), 1.5), t, bins=3)) == pytest.approx(1.5)
    assert float(hre(t[:, None], t, bins=3)) == 0.0
    assert float(hre(t[:, None] + 10.0, t, bins=3)) == 1.0  # all mass outside the range
    # a NumPy transcription on the marginal-fidelity toy: point estimates score worse than the ensemble
    rng = _rng(key)
    m = 2.0 * rng.normal(size=(200, 8))
    truth = m + 2.0 * rng.normal(size=m.shape)
    samples = m[:, None] + 2.0 * rng.normal(size=(200, 16, 8))
    point = np.repeat(samples.mean(1, keepdims=True), 16, axis=1)  # same shape: one compilation
    got = []
    for x in (samples, point):
        edges = np.linspace(truth.min(), truth.max(), 21)
        q = np.histogram(x, bins=edges)[0] / x.size
        p = np.histogram(truth, bins=edges)[0] / truth.size
        got.append(float(hre(jnp.asarray(x), jnp.asarray(truth))))
        assert got[-1] == pytest.approx(np.abs(q - p)[p > 0].sum(), rel=1e-5, abs=1e-6)
    assert got[0] < 0.1 < 0.2 < got[1]
