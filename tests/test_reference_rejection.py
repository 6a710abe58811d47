"""Rejection rules: the published eps rule, Bayesian importance weights against the exact posterior."""

import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.reference import exact, pool, rejection, validate


def test_eps_select_rule_and_errors():
    rng = np.random.default_rng(0)
    mae = np.linspace(0, 1e-3, 1001)
    idx, w, rate = rejection.eps_select(rng, mae, eps=3e-4, num=100)
    assert rate == pytest.approx(301 / 1001) and np.all(mae[idx] <= 3e-4) and len(set(idx)) == 100
    expect = np.exp(-(mae[idx] ** 2) / (2 * 1e-4**2))
    np.testing.assert_allclose(w, expect / expect.sum(), rtol=1e-10)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="eps"):
            rejection.eps_select(rng, mae, eps=bad)
    with pytest.raises(ValueError, match="sigma"):
        rejection.eps_select(rng, mae, eps=3e-4, sigma=0.0)
    with pytest.raises(ValueError, match=r"acceptance rate 0.002\).*about 50,050"):
        rejection.eps_select(rng, mae, eps=1.5e-6, num=100)


def test_systematic_resample_counts():
    w = np.array([0.5, 0.25, 0.125, 0.125])
    idx = rejection.systematic_resample(np.random.default_rng(1), w, 8)
    np.testing.assert_array_equal(np.bincount(idx, minlength=4), [4, 2, 1, 1])
    with pytest.raises(ValueError, match="noise_std"):
        rejection.gaussian_log_weights(np.zeros((2, 3)), np.zeros(3), 0.0)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=3, noise_std=2e-3)
    y = task.cases(5, 1).y_obs[0]
    p = pool.build(task, tmp_path_factory.mktemp("pool"), seed=0, num_chunks=8, chunk_size=2000,
                   augment=False, store_state=False, progress=False)  # fmt: skip
    return task, y, p, *exact.posterior(task, y)


def test_importance_converges_to_exact(setup):
    task, y, p, mean, std = setup
    full_w = rejection.normalize_log_weights(
        rejection.gaussian_log_weights(p.load("y"), y, np.asarray(task.noise_std))
    )[0]
    x = p.load("x").astype(np.float64)
    errors = []
    for size in (500, 16000):
        w = full_w[:size] / full_w[:size].sum()
        mu = np.tensordot(w, x[:size], 1)
        errors.append(np.linalg.norm(mu - mean) / np.linalg.norm(mean))
    assert errors[1] < 0.1 and errors[1] < errors[0]
    ref = rejection.importance(p, y, task.noise_std, seed=0, num=None)
    agree = validate.exact_agreement(ref, mean, std)
    assert agree["mean_rel_error"] < 0.1 and agree["std_rel_error"] < 0.1
    assert ref.info["ess"] > 100
    resampled = rejection.importance(p, y, task.noise_std, seed=0, num=300)
    assert resampled.size == 300 and np.allclose(resampled.weights, 1 / 300)


def test_eps_rule_reference_and_two_ensemble_identity(setup):
    task, y, p, mean, std = setup
    ref = rejection.eps_rule(p, y, seed=0, eps=4e-3, num=50)
    assert ref.size == 50 and 0 < ref.info["acceptance_rate"] <= 1
    with pytest.raises(ValueError, match="acceptance rate"):
        rejection.eps_rule(p, y, seed=0, eps=1e-9, num=50)
    with pytest.raises(ValueError, match="y_obs"):
        rejection.eps_rule(p, y[:2], seed=0, eps=4e-3)
    ens = {"prior": p.load("x")[:40]}
    out = validate.two_ensemble_ratios(ens, ref, ref, task=task)
    assert all(r == pytest.approx(1.0) for r in out["ratios"].values())
