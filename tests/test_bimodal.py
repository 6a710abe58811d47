"""The synthetic many-to-one study: analytic posterior, ranking reversal, law of total variance."""

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax.studies import bimodal

SMALL = dict(
    num_train=2048, num_calibration=200, num_test=400, num_samples=32, width=32, num_steps=400, batch_size=128
)


@pytest.fixture(scope="module")
def result():
    return bimodal.run({**bimodal.default_config(), **SMALL})


def test_posterior_moments_match_exact_draws(key):
    problem = bimodal.Problem(dim=3, mean=0.5, prior_std=1.0, noise_std=0.1)
    z, x = problem.simulate(key, 4)
    draws = problem.sample_posterior(jr.fold_in(key, 1), x, 8000)
    mean, var = problem.posterior_moments(x)
    np.testing.assert_allclose(draws.mean(0), mean, atol=4 * jnp.sqrt(var.max() / 8000))
    np.testing.assert_allclose(draws.var(0), var, rtol=0.08, atol=1e-4)
    # bimodal: for |x| >> noise the draws sit near +-x, never near the mean between the modes
    far = np.asarray(x) > 0.5
    near_mode = jnp.minimum(jnp.abs(draws - x), jnp.abs(draws + x)) < 5 * problem.noise_std
    assert float(near_mode[:, far].mean()) > 0.99


THREE = ("point", "mixture", "generative")


def test_rmse_prefers_the_point_estimator(result):
    assert bimodal.ranking(result, "rmse")[0] == "point"
    m = result["metrics"]
    # the exact posterior's ensemble mean is the MSE estimator's target: they tie on RMSE (mean),
    # while one posterior draw is worse by the posterior spread
    assert m["generative"]["rmse_mean"] == pytest.approx(m["point"]["rmse"], rel=0.05)
    assert m["generative"]["rmse"] > 1.2 * m["generative"]["rmse_mean"]
    # the MAE estimator learns the median (in the heavier mode): a larger RMSE than the MSE one
    assert m["point_mae"]["rmse"] > m["point"]["rmse"]


def test_crps_tie_with_a_coverage_gap(result):
    m = result["metrics"]
    exact, sharp = m["generative"], m["generative_sharp"]
    assert abs(sharp["crps"] - exact["crps"]) < 0.02 * exact["crps"]  # a tie at this test size
    assert sharp["coverage_error"] > 3 * exact["coverage_error"] and sharp["coverage_error"] > 0.05


@pytest.mark.parametrize("metric", ["crps", "marginal_w1", "variance_ratio", "coverage_error"])
def test_distributional_metrics_reverse_the_ranking(result, metric):
    assert bimodal.ranking(result, metric, THREE)[-1] == "point"
    m = result["metrics"]
    assert (
        m["point"][metric] > 1.5 * max(m["mixture"][metric], m["generative"][metric])
        or metric == "variance_ratio"
    )


def test_point_marginal_is_narrower_by_the_law_of_total_variance(result):
    ltv = result["law_of_total_variance"]
    m = result["metrics"]
    assert m["point"]["variance_ratio"] < 0.5  # measurably narrower than the true marginal
    assert abs(m["generative"]["variance_ratio"] - 1) < 0.1
    # Var(point) ~ Var[z] - E[Var(z|x)]: the missing variance is the posterior width
    np.testing.assert_allclose(ltv["point_variance"], ltv["predicted_point_variance"], rtol=0.15)


def test_conformal_intervals_reach_nominal_coverage(result):
    level = result["config"]["level"]
    for model, m in result["metrics"].items():
        assert m["conformal_coverage"] > level - 0.05, model
    assert result["metrics"]["point"]["coverage_error"] > 0.4  # zero-width intervals cover nothing


def test_table_lists_every_model(result):
    text = bimodal.table(result)
    for model in bimodal.MODELS:
        assert f"| {model} |" in text
    assert "Law of total variance" in text


def test_bad_input():
    with pytest.raises(ValueError, match="dim"):
        bimodal.Problem(dim=0)
    with pytest.raises(ValueError, match="noise_std"):
        bimodal.Problem(noise_std=0.0)
    with pytest.raises(ValueError, match="missing key"):
        bimodal.run({"seed": 0})
    with pytest.raises(ValueError, match="samples/truth"):
        bimodal.evaluate(jnp.zeros((4, 2)), jnp.zeros((4, 2)), jnp.zeros((4, 1, 2)), jnp.zeros((4, 2)))
