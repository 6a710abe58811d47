"""L-C2ST on a Gaussian toy with a known posterior: theta ~ N(0, 1), x = theta + N(0, 0.5^2), so
p(theta | x) = N(x / 1.25, 0.2). An estimator equal to it is rejected at about the test's level; a
shifted one (by 2.2 posterior sd) is rejected everywhere."""

import jax.random as jr
import numpy as np
import pytest

from posteriorjax.metrics.lc2st import lc2st

M, N_EVAL, K, NULL, ALPHA = 200, 100, 20, 19, 0.05
SETTINGS = dict(num_null=NULL, width=16, steps=300)
SD = np.sqrt(0.2)


def toy(rng, shift=0.0):
    theta = rng.normal(size=(M, 1))
    x = theta + 0.5 * rng.normal(size=(M, 1))
    theta_q = x / 1.25 + shift + SD * rng.normal(size=(M, 1))
    x_o = 1.1 * rng.normal(size=(K, 1))
    theta_o = x_o[:, None] / 1.25 + shift + SD * rng.normal(size=(K, N_EVAL, 1))
    return theta, x, theta_q, theta_o, x_o


def test_lc2st_keeps_its_level_for_the_exact_posterior_and_rejects_a_shifted_one():
    rng = np.random.default_rng(0)
    theta, x, theta_q, theta_o, x_o = toy(rng)
    exact = lc2st(jr.key(0), theta, x, theta_q, theta_o=theta_o, x_o=x_o, **SETTINGS)
    theta, x, theta_q, theta_o, x_o = toy(rng, shift=1.0)  # same shapes: no recompilation
    wrong = lc2st(jr.key(1), theta, x, theta_q, theta_o=theta_o, x_o=x_o, **SETTINGS)
    assert exact.statistic.shape == exact.p_value.shape == (K,) and exact.null.shape == (K, NULL)
    # the K observations share one set of classifiers, so their p-values are correlated: the size over
    # independent calibration sets is the slow test below
    assert int(np.sum(np.asarray(exact.p_value) < ALPHA)) <= 3
    assert np.all(np.asarray(wrong.p_value) < ALPHA)
    assert float(np.min(wrong.statistic)) > float(np.max(exact.statistic))
    np.testing.assert_array_equal(exact.p_value, np.mean(exact.null >= exact.statistic[:, None], axis=1))


@pytest.mark.slow
def test_lc2st_size_over_independent_calibration_sets():
    rng = np.random.default_rng(1)
    p = []
    for r in range(20):  # a fresh calibration set and classifier per repeat, one observation each
        theta, x, theta_q, theta_o, x_o = toy(rng)
        p.append(
            float(lc2st(jr.key(r), theta, x, theta_q, theta_o=theta_o[0], x_o=x_o[0], **SETTINGS).p_value)
        )
    assert sum(v < ALPHA for v in p) <= 3


def test_lc2st_names_bad_arguments():
    theta, x, theta_q, theta_o, x_o = toy(np.random.default_rng(0))
    with pytest.raises(ValueError, match="theta, x, theta_q: expected"):
        lc2st(jr.key(0), theta, x[:-1], theta_q, theta_o=theta_o, x_o=x_o)
    with pytest.raises(ValueError, match="theta_o, x_o: expected"):
        lc2st(jr.key(0), theta, x, theta_q, theta_o=theta_o[..., None], x_o=x_o)
    with pytest.raises(ValueError, match="num_null: expected a positive integer"):
        lc2st(jr.key(0), theta, x, theta_q, theta_o=theta_o, x_o=x_o, num_null=0)
    with pytest.raises(ValueError, match="theta_q: expected finite"):
        lc2st(jr.key(0), theta, x, np.full_like(theta_q, np.nan), theta_o=theta_o, x_o=x_o)
