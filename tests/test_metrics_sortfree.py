"""Sort-free metric paths give the sorted paths' values: pairwise CRPS and coverage by counting."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax.metrics import calibration, scoring


def _ensembles(key, n):
    """A continuous ensemble and a tie-heavy binary one (Darcy's {3, 12} projection), with truths."""
    k1, k2 = jr.split(key)
    x = jr.normal(k1, (n, 6, 6))
    t = 1.3 * jr.normal(k2, (6, 6))
    xb, tb = jnp.where(x > 0.3, 12.0, 3.0), jnp.where(t > 0.0, 12.0, 3.0)
    return [(x, t), (xb, tb), (x, x[0]), (xb, xb[1])]


@pytest.mark.parametrize("n", [pytest.param(2, marks=pytest.mark.slow), 40])
def test_coverage_by_counting_equals_sorted_quantile_intervals(key, n):
    x, t = (jnp.stack(v) for v in zip(*_ensembles(jr.fold_in(key, n), n), strict=True))
    counted = jax.vmap(lambda s, y: calibration.coverage(s, y, method="count"))(x, t)
    sorted_ = jax.vmap(lambda s, y: calibration.coverage(s, y, method="sort"))(x, t)
    np.testing.assert_array_equal(np.delete(counted, 2, 0), np.delete(sorted_, 2, 0))
    # case 2, truth = a member: jnp.interp evaluates q(p_k) on the segment to its left as
    # x_(k-1) + (x_(k) - x_(k-1)), which can round below x_(k) and drop the boundary
    # element; counting keeps it (the exact answer), so it may only count more
    assert np.all(np.asarray(counted[2]) >= np.asarray(sorted_[2]))
    assert float(jnp.max(counted[2] - sorted_[2])) <= 2.0 / t[2].size


@pytest.mark.parametrize("n", [pytest.param(5, marks=pytest.mark.slow), 40])
def test_pairwise_crps_equals_sorted_crps(key, n, monkeypatch):
    monkeypatch.setattr(scoring, "PAIRWISE_BLOCK", 64)  # 144 elements: two full blocks and a padded one
    # CRPS is per element: the four ensembles side by side are one call
    x, t = (jnp.concatenate(v, axis=-1) for v in zip(*_ensembles(jr.fold_in(key, n), n), strict=True))
    w = jr.uniform(jr.fold_in(key, 99), (n,)) + 0.1
    options = [(None, "standard"), (w / w.sum(), "standard"), (None, "fair")]
    for weights, est in options:
        pair = scoring.crps(x, t, weights, estimator=est, method="pairwise")
        ref = scoring.crps(x, t, weights, estimator=est, method="sort")
        np.testing.assert_allclose(pair, ref, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(x))))


def test_sort_free_methods_reject_bad_options(key):
    x, t = _ensembles(key, 4)[0]
    with pytest.raises(ValueError, match="method"):
        scoring.crps(x, t, method="quick")
    with pytest.raises(ValueError, match="method"):
        calibration.coverage(x, t, method="rank")
    with pytest.raises(ValueError, match="equal weights"):
        calibration.coverage(x, t, weights=jnp.full((4,), 0.25), method="count")
