"""Physical validity (`Task.valid`) of the interface, CCS and LTMI tasks, and invalid members in the suite."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.metrics import diagnostics, posterior, suite
from posteriorjax.physics import co2
from posteriorjax.random_fields import sample_batch
from posteriorjax.sweep.statistics import observation_values
from posteriorjax.tasks import ccs, interface, ltmi

CCS_SMALL = dict(nz=8, nr=24, years=0.5, pressure_steps=2, wells=(0, 10))


@pytest.fixture(scope="module")
def built():
    return {
        "interface": interface.build("interface_potential", resolution=16),
        "ccs": ccs.build("ccs", **CCS_SMALL),
        "ltmi": ltmi.build("ltmi", resolution=16, pooled_size=8),
    }


def _violations(name, x):
    """Fields just outside each task's domain, built from the prior draw `x`."""
    nan = x.at[0, 0, 0].set(jnp.nan)
    if name == "interface":
        # +inf and -inf Fourier terms meet near theta = pi / 8: a NaN indicator
        big = 3e38
        return [nan, x.at[1].set(big).at[9].set(big).at[2].set(-big).at[10].set(-big)]
    if name == "ccs":
        return [nan, x.at[0, 2, 3].set(0.0), x.at[0, 2, 3].set(-5.0), x.at[0, 2, 3].set(1e-25)]
    return [nan, x.at[1, 3, 4].set(-1e-3), x.at[0, 0, 0].set(jnp.inf)]


def _inside(name, x):
    """Fields far from the prior that the solver still accepts."""
    if name == "interface":
        return [x.at[0].set(1e38)]  # an inclusion covering the whole domain
    if name == "ccs":
        return [x.at[0, 2, 3].set(1e-20), x.at[0, 2, 3].set(1e6)]
    return [x.at[0, 0, 0].set(0.0), x.at[1].set(1e6)]


@pytest.mark.parametrize("name", ["interface", "ccs", "ltmi"])
def test_valid_accepts_prior_draws_and_rejects_violations(built, name, key):
    task = built[name]
    draws = sample_batch(task.prior, key, 4)
    x = draws[0]
    bad, good = _violations(name, x), _inside(name, x)
    fields = jnp.concatenate([draws, jnp.stack(bad + good)])
    expected = [True] * 4 + [False] * len(bad) + [True] * len(good)
    eager = [bool(task.valid(f)) for f in fields]
    assert eager == expected
    assert np.asarray(jax.jit(jax.vmap(task.valid))(fields)).tolist() == expected


def test_interface_overflow_is_outside_the_domain(built):
    task = built["interface"]
    x = task.prior.mean.reshape(task.unknown_shape)
    overflow = _violations("interface", x)[1]
    assert bool(jnp.all(jnp.isfinite(overflow)))  # the default (finite) check would accept it
    with pytest.raises(ValueError, match="non-finite"):
        task.forward(overflow)  # eager: the rendered coefficient a = 1 + 9 chi has NaNs


def test_ccs_permeability_below_the_normal_range_breaks_the_run(built, key):
    task = built["ccs"]
    x = task.prior.sample(key)
    threshold = float(np.finfo(np.float32).tiny / co2.MILLIDARCY)
    assert bool(task.valid(jnp.full_like(x, 2 * threshold))) and not bool(task.valid(x * 0 + threshold / 2))
    # just inside: the solution of a near-impermeable cell; just outside: zero saturation everywhere
    u = jax.jit(jax.vmap(task.physics))(jnp.stack([x.at[0, 2, 3].set(1e-20), x.at[0, 2, 3].set(1e-25)]))
    assert float(jnp.max(u[0])) > 0.1 and float(jnp.max(jnp.abs(u[1]))) == 0.0


# -- the suite ----------------------------------------------------------------


@pytest.fixture(scope="module")
def darcy_case():
    task = tasks.get("darcy", resolution=16, num_sensors=32)
    case = task.cases(0, 1)
    samples = sample_batch(task.prior, jr.key(1), 8)
    ref = sample_batch(task.prior, jr.key(2), 8)
    return task, case.x_true[0], case.y_obs[0], samples, ref


def test_evaluate_counts_invalid_darcy_members_without_solving_them(darcy_case):
    task, truth, y_obs, samples, ref = darcy_case
    bad = [1, 4, 6]
    zeroed = samples.at[1, 0, 3:6, 3:6].set(0.0).at[4].set(0.0).at[6, 0, 0, 0].set(-1.0)
    rec = suite.evaluate(zeroed, ref, None, task=task, truth=truth, y_obs=y_obs)
    assert rec["num_invalid"] == len(bad) and rec["num_nonfinite"] == 0
    assert np.isnan(rec["obs_misfit"])  # a mean over the ensemble is undefined with invalid members
    clean = suite.evaluate(samples, ref, None, task=task, truth=truth, y_obs=y_obs)
    expected = diagnostics.observation_misfit(task.forward, samples, y_obs, task.noise_std)
    assert clean["num_invalid"] == 0
    np.testing.assert_allclose(clean["obs_misfit"], float(jnp.mean(expected)), rtol=1e-5)
    # the distributional metrics compare fields: every member counts, invalid ones included
    fields = jax.vmap(task.evaluation_field)
    np.testing.assert_allclose(
        rec["mean_error"], float(posterior.mean_error(fields(zeroed), fields(ref))), rtol=1e-5
    )
    for k in ("mmd", "swd", "crps", "coverage_error"):
        assert np.isfinite(rec[k]), k


def test_evaluate_with_no_valid_member_gives_nan_misfit_without_solving(darcy_case):
    task, truth, y_obs, samples, ref = darcy_case
    rec = suite.evaluate(jnp.zeros_like(samples), ref, None, task=task, truth=truth, y_obs=y_obs)
    assert rec["num_invalid"] == 8 and np.isnan(rec["obs_misfit"]) and np.isfinite(rec["mmd"])


def test_observation_values_under_jit_and_vmap_match_the_sweep(darcy_case):
    task, truth, y_obs, samples, _ = darcy_case
    cases = jnp.stack([samples, samples.at[2].set(0.0), jnp.zeros_like(samples)])

    def values(s):
        return diagnostics.observation_values(
            task.forward, s, y_obs, task.noise_std, valid=task.valid, fallback=truth
        )

    out = jax.jit(jax.vmap(values))(cases)
    assert out["num_invalid"].tolist() == [0, 1, 8]
    assert np.isfinite(out["obs_misfit"][0]) and np.isnan(out["obs_misfit"][1:]).all()
    swept = jax.jit(jax.vmap(lambda s: observation_values(task, s, truth, y_obs)))(cases)
    np.testing.assert_array_equal(swept["num_invalid"], out["num_invalid"])
    np.testing.assert_allclose(swept["obs_misfit"], out["obs_misfit"], rtol=1e-6)
