"""The `ccs` and `ltmi` tasks: registry, shapes, observations, priors, evaluation fields, bad options."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.tasks import ccs, ltmi

CCS_SMALL = dict(nz=8, nr=24, years=0.5, pressure_steps=2, wells=(0, 10))
LTMI_SMALL = dict(resolution=32, pooled_size=8)


@pytest.fixture(scope="module")
def ccs_task():
    return ccs.build("ccs", **CCS_SMALL)


@pytest.fixture(scope="module")
def ltmi_task():
    return ltmi.build("ltmi", **LTMI_SMALL)


def test_registered_and_defaults_match_the_benchmark():
    assert {"ccs", "ltmi", "ltmi_full"} <= set(tasks.names())
    task = tasks.get("ccs")
    assert task.unknown_shape == (1, 64, 200) and task.state_shape == (1, 64, 200)
    assert task.num_observations == 128 and float(task.noise_std) == pytest.approx(0.04)
    np.testing.assert_array_equal(np.asarray(task.observation.columns), [0, 50])


def test_ccs_cases_observe_the_well_columns(ccs_task):
    cases = ccs_task.cases(0, 2)
    assert cases.x_true.shape == (2, 1, 8, 24) and cases.y_obs.shape == (2, 16)
    u = np.asarray(cases.u_true)
    assert u.min() >= -1e-5 and u.max() <= 1 - 0.2 + 1e-5 and u[:, 0, :, 0].max() > 0.3
    forward = jax.vmap(ccs_task.forward)(cases.x_true)
    # the same saturation solve compiled in another program (vmapped here, batched in `cases`):
    # float32 rounding of the nonlinear steps differs by a few ulps between the two
    wells = u[:, 0][:, :, [0, 10]].transpose(0, 2, 1).reshape(2, -1)
    np.testing.assert_allclose(forward, wells, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_less(np.abs(np.asarray(cases.y_obs) - np.asarray(forward)), 0.04 * 6)


def test_ccs_field_stats_are_the_hierarchical_moments():
    m = np.linspace(10, 500, 200001)
    s = np.linspace(1, 500, 200001)
    mean, std = ccs.lognormal_stats((10.0, 500.0), (1.0, 500.0))
    assert mean == pytest.approx(m.mean()) and std == pytest.approx(
        np.sqrt((s**2).mean() + m.var()), rel=1e-5
    )


def test_ltmi_shapes_range_and_observation(ltmi_task):
    cases = ltmi_task.cases(0, 4)
    x = np.asarray(cases.x_true)
    assert x.shape == (4, 2, 32, 32) and cases.u_true.shape == (4, 1, 32, 32) and cases.y_obs.shape == (4, 64)
    assert x.min() >= 0.01 - 1e-6 and x.max() <= 5 + 1e-5
    pooled = np.asarray(cases.u_true)[:, 0].reshape(4, 8, 4, 8, 4).mean(axis=(2, 4)).reshape(4, -1)
    np.testing.assert_allclose(jax.vmap(ltmi_task.forward)(cases.x_true), pooled, rtol=1e-5)


def test_ltmi_morphologies_differ(key):
    clouds = ltmi.LayeredMorphology(32, cloud_prob=1.0).sample(key)
    cells = ltmi.LayeredMorphology(32, cloud_prob=0.0).sample(key)
    # thresholded clouds leave clear sky at the floor value; Worley cells reach it only at the feature points
    assert float(jnp.mean(clouds <= 0.01 + 1e-6)) > 0.2
    assert float(jnp.mean(cells <= 0.01 + 1e-6)) < 0.05


def test_ltmi_metrics_act_on_the_layer_mean(ltmi_task):
    x = ltmi_task.prior.sample(jax.random.key(1))
    np.testing.assert_allclose(ltmi_task.evaluation_field(x), x.mean(0, keepdims=True))
    layers = ltmi.build("ltmi", evaluation="layers", **LTMI_SMALL)
    np.testing.assert_array_equal(layers.evaluation_field(x), x)
    np.testing.assert_array_equal(ltmi_task.layer_field(x, 1), x[1:2])


def test_ltmi_observation_options():
    both = ltmi.build("ltmi", observe="both", observation="full", resolution=16)
    assert both.state_shape == (2, 16, 16) and both.num_observations == 2 * 256
    sensors = ltmi.build("ltmi", observation="sensors", num_sensors=20, resolution=16)
    assert sensors.num_observations == 20
    with pytest.raises(ValueError, match="observe"):
        ltmi.build("ltmi", observe="radiance")
    with pytest.raises(ValueError, match="evaluation"):
        ltmi.build("ltmi", evaluation="median")
    with pytest.raises(ValueError, match="porosity"):
        ccs.build("ccs", porosity=1.5)
