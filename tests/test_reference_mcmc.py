"""pCN/gpCN/MALA against an exact posterior, and the R-hat/ESS estimators against known answers and ArviZ."""

import warnings

import jax.random as jr
import numpy as np
import pytest

from posteriorjax import samplers, tasks
from posteriorjax.reference import exact, mcmc


@pytest.fixture(scope="module")
def problem():
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=3, noise_std=2e-3)
    y = task.cases(0, 1).y_obs[0]
    return task, y, *exact.posterior(task, y)


@pytest.mark.parametrize("method", ["pcn", pytest.param("mala", marks=pytest.mark.slow)])
def test_chains_reach_exact_posterior(problem, key, method):
    task, y, mean, std = problem
    res = mcmc.run(key, task, y, num_chains=64, num_draws=20, burn_in=300, thin=5, method=method)
    x = np.asarray(res.samples).reshape(-1, *task.unknown_shape)
    prior_sd = np.sqrt(exact.prior_pointwise_variance(task.prior))
    # pointwise errors in units of the prior std; MC error ~ std / sqrt(ESS ~ 64 * 20 / few)
    assert np.max(np.abs(x.mean(0) - mean) / prior_sd) < 0.15
    assert np.linalg.norm(x.std(0) - std) / np.linalg.norm(std) < 0.1
    acc = float(np.mean(res.acceptance))
    assert 0.1 < acc < 0.9


def test_gpcn_samples_the_exact_posterior_at_the_benchmark_noise(key):
    """At noise 1e-4 with 48 sensors the prior-preconditioned misfit Hessian has lambda_max ~ 1e4:

    pCN needs beta ~ 1e-2 and hundreds of thousands of steps (README); gpCN's Laplace proposal is
    the posterior itself on a linear-Gaussian task, so it accepts nearly every move at beta = 1.
    """
    task = tasks.get("poisson_fixed", resolution=16, num_sensors=48, noise_std=1e-4)
    y = task.cases(3, 1).y_obs[0]
    mean, std = exact.posterior(task, y)
    spectrum = exact.misfit_spectrum(task)
    assert spectrum.max() > 1e3
    lap = mcmc.laplace(task, y)  # linear-Gaussian: the MAP is the posterior mean, GN Hessian exact
    informed = spectrum > 1.0
    np.testing.assert_allclose(np.sort(np.asarray(lap.eigenvalues))[::-1][: informed.sum()],
                               spectrum[informed], rtol=2e-2)  # fmt: skip
    map_field = np.asarray(task.prior.transform(np.asarray(lap.mode).reshape(task.unknown_shape)))
    assert np.linalg.norm(map_field - mean) / np.linalg.norm(mean) < 1e-2
    res = mcmc.run(key, task, y, num_chains=8, num_draws=40, burn_in=30, thin=2, method="gpcn")
    x = np.asarray(res.samples).reshape(-1, *task.unknown_shape)
    assert np.linalg.norm(x.mean(0) - mean) / np.linalg.norm(mean) < 0.03
    assert np.linalg.norm(x.std(0) - std) / np.linalg.norm(std) < 0.06  # MC error of 320 draws ~ 0.04
    assert float(np.mean(res.acceptance)) > 0.95 and float(np.min(res.step)) > 0.9
    assert mcmc.diagnose(res).rhat_max < 1.1


def test_gpcn_sampler_final_states(problem, key):
    task, y, mean, std = problem
    sampler = samplers.get("pcn", task, burn_in=10, num_steps=10, method="gpcn")
    x = np.asarray(sampler.sample(key, y, 128, sampler.hparams()))
    prior_sd = np.sqrt(exact.prior_pointwise_variance(task.prior))
    assert np.max(np.abs(x.mean(0) - mean) / prior_sd) < 0.15
    assert np.linalg.norm(x.std(0) - std) / np.linalg.norm(std) < 0.1
    with pytest.raises(ValueError, match="method"):
        samplers.get("pcn", task, method="mala")


def test_rhat_and_ess_known_answers(key):
    iid = np.asarray(jr.normal(key, (8, 400, 3)))
    assert np.all(np.abs(mcmc.split_rhat(iid) - 1) < 0.02)
    ess = mcmc.effective_sample_size(iid)
    assert np.all((ess > 0.7 * 3200) & (ess < 1.3 * 3200))
    # AR(1) with coefficient rho: ESS = N (1 - rho) / (1 + rho)
    rho, rng = 0.8, np.random.default_rng(0)
    x = np.zeros((8, 4000))
    for t in range(1, 4000):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(8)
    expect = 8 * 4000 * (1 - rho) / (1 + rho)
    assert 0.75 * expect < mcmc.effective_sample_size(x) < 1.25 * expect
    shifted = iid + np.arange(8)[:, None, None]  # chains disagree -> R-hat >> 1
    assert np.all(mcmc.split_rhat(shifted) > 2)


def _ar1(rng, shape, rho):
    x = np.zeros(shape)
    x[:, 0] = rng.standard_normal((shape[0], *shape[2:]))
    for t in range(1, shape[1]):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal((shape[0], *shape[2:]))
    return x


def test_rank_normalized_rhat_and_ess_match_arviz():
    """Vehtari et al. (2021) estimators against ArviZ on fixed chains; a set only the rank version flags."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # ArviZ announces its refactor on import
        import arviz as az
    rng = np.random.default_rng(1)
    chain_sets = {
        "iid, odd n": rng.standard_normal((4, 201, 3)),
        "AR(1) 0.9": _ar1(rng, (4, 300, 2), 0.9),
        "one chain 3x wider": rng.standard_normal((4, 500, 2)) * np.array([1.0, 1, 1, 3])[:, None, None],
        "Student t 1.5": rng.standard_t(1.5, (4, 100, 2)),
        "short": rng.standard_normal((2, 7, 2)),
        "(c, n, 2, 2) fields": _ar1(rng, (3, 60, 2, 2), 0.5),
    }
    for name, x in chain_sets.items():
        ds = az.convert_to_dataset(x)
        expected = {
            "rank": (mcmc.rank_rhat, az.rhat(ds, method="rank")),
            "split": (mcmc.split_rhat, az.rhat(ds, method="split")),
            "bulk": (mcmc.ess_bulk, az.ess(ds, method="bulk")),
            "tail": (mcmc.ess_tail, az.ess(ds, method="tail")),
        }
        for kind, (ours, theirs) in expected.items():
            np.testing.assert_allclose(ours(x), theirs["x"].values, rtol=1e-6, err_msg=f"{name}: {kind}")
    # same location, one chain three times wider: plain split R-hat passes, the rank-normalized one does not
    wide = chain_sets["one chain 3x wider"]
    assert np.all(mcmc.split_rhat(wide) < 1.01) and np.all(mcmc.rank_rhat(wide) > 1.1)
    constant = np.ones((3, 50, 1))
    assert mcmc.ess_bulk(constant)[0] == 150 and np.isnan(mcmc.rank_rhat(constant)[0])
    with pytest.raises(ValueError, match=r"draws: expected shape \(chains, n >= 4"):
        mcmc.rank_rhat(np.zeros((2, 3)))


def test_bad_arguments(problem, key):
    task, y, _, _ = problem
    with pytest.raises(ValueError, match="method"):
        mcmc.run(key, task, y, method="hmc")
    with pytest.raises(ValueError, match="num_chains"):
        mcmc.run(key, task, y, num_chains=0)
    with pytest.raises(ValueError, match="step"):
        mcmc.run(key, task, y, step=2.0)
    with pytest.raises(ValueError, match="step"):
        mcmc.run(key, task, y, step=1.5, method="gpcn")
