"""Samplers against the exact posterior of ``poisson_fixed`` (linear-Gaussian) with the oracle prior.

Tolerances are sample-size aware; nothing depends on RNG bit-streams. The oracle prior
(exact GRF denoiser) separates sampler error from prior-learning error.
"""

import logging

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import nn, samplers, tasks, training
from posteriorjax.metrics import posterior as pm
from posteriorjax.metrics import suite
from posteriorjax.reference import exact


@pytest.fixture(scope="module")
def problem():
    task = tasks.get("poisson_fixed", resolution=16, num_sensors=24, noise_std=1e-3)
    y = task.cases(7, 1).y_obs[0]
    mean, std = exact.posterior(task, y)
    ref = exact.sample(jr.key(99), task, y, 256)
    prior = jax.vmap(task.prior.sample)(jr.split(jr.key(5), 64))
    return task, y, mean, std, ref, prior


def _rmse(a, b):
    return float(jnp.sqrt(jnp.mean((jnp.asarray(a) - jnp.asarray(b)) ** 2)))


def _misfit(task, xs, y):
    return float(jnp.mean(jax.vmap(lambda x: task.misfit(x, y))(xs)))


def test_exact_sampler_matches_closed_form(problem):
    task, y, mean, std, _, _ = problem
    n = 1000
    s = samplers.get("exact", task)
    xs = np.asarray(s.sample(jr.key(0), y, n, {}))
    assert np.max(np.abs(xs.mean(0) - mean) / std) < 5.0 / np.sqrt(n)
    assert np.max(np.abs(xs.std(0) / std - 1)) < 5.0 / np.sqrt(2 * n)


def test_sample_compiles_once_per_structure(problem, caplog):
    """Direct `sample` calls with new keys, cases and hyperparameter values reuse one program."""
    task, y, *_ = problem
    s = samplers.get("pcn", task, burn_in=5, num_steps=5)

    def compiles():
        return sum("Compiling jit(_compiled_sample)" in r.getMessage() for r in caplog.records)

    with caplog.at_level(logging.WARNING), jax.log_compiles(True):
        first = s.sample(jr.key(0), y, 4, s.hparams())
        again = s.sample(jr.key(0), y, 4, s.hparams())
        s.sample(jr.key(1), y + 1e-3, 4, s.hparams(step=0.05))
        s.sample(jr.key(2), np.asarray(y), 4, {k: float(v) for k, v in s.hparams(step=0.1).items()})
        assert compiles() == 1  # the same program throughout, Python floats included
        s.sample(jr.key(0), y, 6, s.hparams())  # a new sample count is a new program
        assert compiles() == 2
    np.testing.assert_array_equal(first, again)
    with pytest.raises(ValueError, match="hparams"):
        s.sample(jr.key(0), y, 4, {"steps": 1.0})


@pytest.mark.parametrize("alphas", [pytest.param((1.0,), marks=pytest.mark.slow), (2.0, 2.0)])
def test_esmda_large_ensemble_recovers_exact_posterior(problem, alphas):
    task, y, mean, std, _, _ = problem
    n = 4000
    s = samplers.get("esmda", task, alphas=alphas)
    xs = np.asarray(s.sample(jr.key(1), y, n, s.hparams()))
    # ensemble-gain sampling error ~ 1/sqrt(N) relative to the prior scale
    assert np.max(np.abs(xs.mean(0) - mean)) < 0.2 * np.max(std)
    assert np.max(np.abs(xs.std(0) / std - 1)) < 0.12
    assert np.mean(np.abs(xs.std(0) / std - 1)) < 0.04


def test_esmda_rejects_bad_alphas(problem):
    task = problem[0]
    with pytest.raises(ValueError, match="alphas"):
        samplers.get("esmda", task, alphas=(1.0, 1.0))
    with pytest.raises(ValueError, match="ensemble_size"):
        samplers.get("esmda", task, ensemble_size=1)


GUIDED = {
    "dps": (dict(num_steps=24), "guidance", (0.0, 30.0, 100.0)),
    "fundps": (dict(num_steps=24), "guidance", (0.0, 30.0, 100.0)),
    "funddps": (dict(num_steps=24, forward="exact"), "guidance", (0.0, 30.0, 100.0)),
    "ddis": (
        dict(num_steps=10, ode_steps=2, langevin_steps=10, forward="exact", step_size=1e-3),
        "weight",
        (0.0, 0.3, 1.0),
    ),
    # plain L2 norm of the observation error in physical units (state ~ 1e-2): larger weights
    "diffusionpde": (dict(num_steps=24), "guidance", (0.0, 1000.0, 3000.0)),
}


@pytest.mark.parametrize("name", sorted(GUIDED))
def test_guidance_is_monotone_and_beats_the_prior(problem, name):
    task, y, mean, std, ref, prior = problem
    config, hp, values = GUIDED[name]
    s = samplers.get(name, task, prior="oracle", **config)
    hparams = jax.tree.map(lambda *v: jnp.stack(v), *[s.hparams(**{hp: v}) for v in values])
    xs = jax.jit(jax.vmap(lambda h: s.sample(jr.key(3), y, 48, h)))(hparams)
    assert bool(jnp.all(jnp.isfinite(xs)))
    misfits = [_misfit(task, x, y) for x in xs]
    assert misfits[0] > misfits[1] > misfits[2], misfits  # more guidance -> smaller data misfit
    best = xs[-1]
    assert _rmse(best.mean(0), mean) < 0.7 * _rmse(prior.mean(0), mean)
    assert abs(float(best.std(0).mean() / std.mean()) - 1) < abs(float(prior.std(0).mean() / std.mean()) - 1)
    assert float(pm.mmd(best, ref)) < float(pm.mmd(prior, ref))


def test_diffusionpde_losses_use_the_published_scaling(problem):
    """L_obs = ||obs(u) - y||_2 in physical units; L_pde = ||R(x, u)||_2 / (H W)."""
    task, y = problem[:2]
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 8)
    net = dict(modes=3, width=4, layers=1, projection=4, embed_dim=4)
    joint = training.build_model("joint", "fno", net, task, x_norm=x_norm, u_norm=u_norm, key=jr.key(0))
    s = samplers.get("diffusionpde", task, model=joint, num_steps=2)
    x = task.cases(7, 1).x_true[0]
    u = task.physics(x)
    bump = 1e-3 * jnp.sin(jnp.pi * jnp.linspace(0, 1, 16))[None, :, None] * jnp.ones((1, 1, 16))
    for state in (u, u + bump):
        d = joint.normalizer.normalize(jnp.concatenate([x, state]))
        obs, pde = (c.objective(d, y) for c in s.corrections)
        expect_obs = np.linalg.norm(np.asarray(task.observation(state)) - np.asarray(y))
        expect_pde = np.linalg.norm(np.asarray(task.physics.residual(x, state))) / 256
        np.testing.assert_allclose(float(obs), expect_obs, rtol=1e-3)
        np.testing.assert_allclose(float(pde), expect_pde, rtol=1e-3, atol=1e-6)
    bumped = joint.normalizer.normalize(jnp.concatenate([x, u + bump]))
    assert float(s.corrections[1].objective(bumped, y)) > 1e-3


def test_divergence_is_reported_not_hidden(problem):
    """A diverging sampler returns non-finite samples (never clipped); the suite counts them."""
    task, y, _, _, ref, _ = problem
    config = dict(prior="oracle", forward="exact", num_steps=2, ode_steps=1, langevin_steps=3)
    s = samplers.get("ddis", task, **config)
    xs = s.sample(jr.key(0), y, 8, s.hparams(step_size=1e6, tau=1e-6))
    assert int(jnp.sum(~jnp.all(jnp.isfinite(xs), axis=(1, 2, 3)))) > 0


@pytest.mark.slow
def test_divergence_reaches_the_metric_suite(problem):
    task, y, _, _, ref, _ = problem
    config = dict(prior="oracle", forward="exact", num_steps=2, ode_steps=1, langevin_steps=3)
    s = samplers.get("ddis", task, **config)
    xs = s.sample(jr.key(0), y, 8, s.hparams(step_size=1e6, tau=1e-6))
    record = suite.evaluate(xs, ref, None, task=task)
    assert int(record["num_nonfinite"]) > 0
    assert np.isnan(record["mmd"])
