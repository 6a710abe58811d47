"""The surrogate-accelerated CCS reference (`reference.surrogate`, method `surrogate_rejection`).

At the tiny CCS scale (`tasks.ccs.TINY`, float64: the float32 pressure solve is not robust on
every prior draw there) with stand-in surrogates whose error is known: the simulator itself
(zero error) and the simulator's saturation scaled by 1.1. A trained `surrogate` network is
exercised in the slow test.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import sweep
from posteriorjax.reference import registry, surrogate
from posteriorjax.sweep.settings import settings
from posteriorjax.tasks import ccs

NOISE = 0.1  # wide enough that a 256-candidate tiny pool accepts a few dozen per case


class Scaled(eqx.Module):
    """A stand-in surrogate: the simulator's state times `factor`."""

    physics: eqx.Module
    factor: float = eqx.field(static=True)

    def __call__(self, x):
        return self.factor * self.physics(x)


@pytest.fixture(scope="module")
def task():
    with jax.enable_x64(True):
        return ccs.build("ccs", **ccs.TINY, noise_std=NOISE)


def _spec(**options):
    values = dict(pool_size=256, pool_chunk=128, surrogate="surrogate", **options)
    return registry.section(registry.config("surrogate_rejection", num_samples=8, **values), "ref")


def test_select_is_the_published_rejection():
    """Accept j when U_j < L_j (one uniform per candidate), then keep K of the accepted at random."""
    log_l = np.log(np.random.default_rng(0).uniform(0.01, 1.0, 500))
    idx, info = surrogate.select(np.random.default_rng(7), log_l, num=20)
    rng = np.random.default_rng(7)
    accepted = np.flatnonzero(rng.uniform(size=500) < np.exp(log_l))
    np.testing.assert_array_equal(idx, np.sort(rng.choice(accepted, size=20, replace=False)))
    assert info["accepted"] == accepted.size and info["acceptance_rate"] == accepted.size / 500
    with pytest.raises(ValueError, match="a pool of about"):
        surrogate.select(np.random.default_rng(0), np.full(100, np.log(0.01)), num=50)


def test_per_point_likelihood_is_published():
    y, y_obs = np.random.default_rng(1).normal(size=(5, 6)), np.zeros(6)
    expected = -np.sum(y**2, axis=1) / (2 * 0.04**2 * 6)
    np.testing.assert_allclose(surrogate.log_likelihood(y, y_obs, np.full(6, 0.04)), expected, rtol=1e-12)


@pytest.mark.slow
def test_resimulation_budget_and_validated_weights(task, tmp_path):
    """The kept members are re-simulated; validated weights are L_sim / L_sur, recomputed here."""
    with jax.enable_x64(True):
        cases = task.cases(0, 2)
        spec = _spec(validate=True)
        biased = Scaled(task.physics, 1.1)
        x, w, info = registry.build(spec, task, cases, jr.key(3), tmp_path, surrogate=biased)
        assert x.shape == (2, 8, *task.unknown_shape) and w.shape == (2, 8)
        std = NOISE
        m = task.num_observations
        for i, case in enumerate(info):
            sim = np.stack([np.asarray(task.observation(task.physics(jnp.asarray(v)))) for v in x[i]])
            sur = np.stack([np.asarray(task.observation(biased(jnp.asarray(v)))) for v in x[i]])
            y = np.asarray(cases.y_obs[i])
            log_w = -(np.sum((sim - y) ** 2, 1) - np.sum((sur - y) ** 2, 1)) / (2 * std**2 * m)
            expected = np.exp(log_w - log_w.max())
            np.testing.assert_allclose(w[i], expected / expected.sum(), rtol=1e-6)
            budget = case["error_budget"]
            np.testing.assert_allclose(budget["obs_rmse"], np.sqrt(np.mean((sur - sim) ** 2)), rtol=1e-6)
            assert set(budget["obs_rmse_per_well"]) == {"0", "10"} and budget["obs_rmse"] > 0
            ratio = np.mean(np.exp(log_w))
            np.testing.assert_allclose(budget["kept_accept_ratio"], ratio, rtol=1e-6)
            np.testing.assert_allclose(
                budget["acceptance_rate_simulator_estimate"], case["acceptance_rate"] * ratio, rtol=1e-6
            )
            assert set(budget["metrics"]) == set(surrogate.METRICS) and budget["metrics"]["mean_error"] > 0
        # the plain (published) reference: the same members, uniform weights
        x0, w0, _ = registry.build(_spec(), task, cases, jr.key(3), tmp_path, surrogate=biased)
        np.testing.assert_array_equal(x0, x)
        np.testing.assert_allclose(w0, 1.0 / 8)
        # an exact surrogate: no error, validated weights uniform, metrics unchanged
        exact = Scaled(task.physics, 1.0)
        _, w1, info1 = registry.build(spec, task, cases, jr.key(3), tmp_path, surrogate=exact)
        np.testing.assert_allclose(w1, 1.0 / 8, rtol=1e-9)
        assert info1[0]["error_budget"]["obs_rmse"] < 1e-12
        assert info1[0]["error_budget"]["metrics"]["mean_error"] < 1e-9
        report = registry.report(task, spec, info)
        assert "validated" in report["rule"] and report["settings"]["surrogate"] == "surrogate"


@pytest.mark.slow
def test_held_out_error_per_cell_and_well(task):
    with jax.enable_x64(True):
        err = surrogate.held_out_error(task, Scaled(task.physics, 1.1), jr.key(0), num=8)
        x = jax.vmap(task.prior.sample)(jr.split(jr.key(0), 8))
        u = np.stack([np.asarray(task.physics(v)) for v in x])
    assert err["rmse_per_cell"].shape == task.state_shape
    np.testing.assert_allclose(err["rmse_per_cell"], 0.1 * np.sqrt(np.mean(u**2, axis=0)), rtol=1e-6)
    np.testing.assert_allclose(err["relative_l2"], 0.1, rtol=1e-6)
    for c in (0, 10):
        np.testing.assert_allclose(
            err["rmse_per_well"][str(c)], 0.1 * np.sqrt(np.mean(u[..., c] ** 2)), rtol=1e-6
        )
        dry = not np.any(u[..., c])  # every draw leaves the column dry: no relative error exists
        if dry:
            assert np.isnan(err["relative_l2_per_well"][str(c)]), c
        else:
            np.testing.assert_allclose(err["relative_l2_per_well"][str(c)], 0.1, rtol=1e-6)
    assert any(np.any(u[..., c]) for c in (0, 10))  # the injection well is wet


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"method": "surrogate_rejection"}, r"ref\.surrogate: method 'surrogate_rejection' needs"),
        ({"method": "importance", "surrogate": "surrogate"}, r"ref\.surrogate: only the methods"),
        (
            {"method": "surrogate_rejection", "surrogate": "surrogate", "surrogate_rule": "eps"},
            "surrogate_rule",
        ),
        ({"method": "surrogate_rejection", "surrogate": "surrogate", "validate": 1}, r"ref\.validate"),
        ({"method": "surrogate_rejection", "surrogate": "surrogate", "augment": True}, r"ref\.augment"),
    ],
)
def test_bad_sections(options, match):
    with pytest.raises(ValueError, match=match):
        registry.section(options, "ref")


def test_bad_surrogates(task, tmp_path):
    from posteriorjax.tasks.base import Cases

    zeros = np.zeros((1, *task.unknown_shape))
    cases = Cases(zeros, zeros, np.zeros((1, task.num_observations)))
    with pytest.raises(ValueError, match="needs a trained surrogate"):
        registry.build(_spec(), task, cases, jr.key(0), tmp_path)
    with pytest.raises(ValueError, match="state shape"):
        surrogate.surrogate_task(task, lambda x: x[:, :2])
    with pytest.raises(ValueError, match="takes no surrogate"):
        registry.build(registry.section({"method": "importance"}, "r"), task, cases, jr.key(0), tmp_path,
                       surrogate=Scaled(task.physics, 1.0))  # fmt: skip


def _sweep_config(reference):
    from configs import base

    return base.sweep(
        True, tasks={"ccs": dict(ccs.TINY)}, samplers={"prior": {}}, num_cases=1, num_samples=4,
        reference=reference,
    )  # fmt: skip


def test_sweep_parses_the_reference_surrogate():
    ref = sweep.reference_config(
        "surrogate_rejection", num_samples=8, pool_size=256, surrogate={"kind": "surrogate", "num_steps": 5}
    )
    s = settings(_sweep_config(ref))
    assert s.reference_networks["ccs"].kind == "surrogate" and s.reference_networks["ccs"].num_steps == 5
    bad = sweep.reference_config("surrogate_rejection", surrogate="prior")
    with pytest.raises(ValueError, match=r"config\.reference\.surrogate\.kind: .* expected kind 'surrogate'"):
        settings(_sweep_config(bad))
    bad = sweep.reference_config("surrogate_rejection", surrogate={"kind": "surrogate", "steps": 5})
    with pytest.raises(ValueError, match=r"config\.reference\.surrogate: unknown key"):
        settings(_sweep_config(bad))


@pytest.mark.slow
def test_trained_surrogate_reference(tmp_path):
    """A `surrogate` network trained by `training.run` at the tiny CCS scale, its held-out error,
    and the sweep's `surrogate_rejection` reference through it (trained from the section's spec)."""
    from posteriorjax import training

    with jax.enable_x64(True):
        task = ccs.build("ccs", **ccs.TINY, noise_std=NOISE)
        cfg = training.config("ccs", "surrogate", "tiny")
        cfg.task_options = dict(ccs.TINY, noise_std=NOISE)
        cfg.train.progress, cfg.data.source, cfg.data.pool_size = False, "pool", 512
        _, model, _ = training.run(cfg, tmp_path / "net")
        err = surrogate.held_out_error(task, model, jr.key(5), num=32)
        assert err["relative_l2"] < 0.5 and set(err["rmse_per_well"]) == {"0", "10"}
        ref = sweep.reference_config(
            "surrogate_rejection", num_samples=8, pool_size=512, pool_chunk=256, surrogate="surrogate",
            validate=True,
        )  # fmt: skip
        config = _sweep_config(ref)
        config.tasks.ccs.noise_std = NOISE
        config.training.num_steps = 100
        from posteriorjax.sweep.plan import Plan

        plan = Plan.build(settings(config))
        x, w, report = plan.reference("ccs", tmp_path / "sweep", lead=True, progress=False)
        assert x.shape == (1, 8, *task.unknown_shape) and np.isclose(w.sum(), 1.0)
        assert report["method"] == "surrogate_rejection" and "error_budget" in report["cases"][0]
        assert (tmp_path / "sweep" / "networks" / "ccs").is_dir()
