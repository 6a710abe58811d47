import dataclasses

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import tasks, testing
from posteriorjax.tasks import base

RES = 16
CORE = ["darcy", "darcy_lowres", "poisson", "poisson_fixed", "poisson_lowres", "poisson_fixed_lowres"]


@pytest.fixture(scope="module")
def built():
    return {name: tasks.get(name, resolution=RES, num_sensors=24) for name in CORE}


def test_registry_lists_tasks_and_rejects_unknown():
    assert set(CORE) <= set(tasks.names())
    with pytest.raises(ValueError, match="unknown task 'darcyy'"):
        tasks.get("darcyy")
    with pytest.raises(ValueError, match="no option"):
        tasks.get("darcy", resolutoin=32)
    with pytest.raises(ValueError, match="observation"):
        tasks.get("poisson", resolution=RES, observation="radar")
    with pytest.raises(ValueError, match="num_sensors"):
        tasks.get("darcy", resolution=8, num_sensors=128)


@pytest.mark.parametrize("name", CORE)
def test_task_contract(built, name):
    # the public checks: shapes, channels, cases fixed (case i independent of num) and
    # consistent (u_true = solve(x_true), noise of the task's std), forward under jit/vmap
    # equal to the loop, named shape errors
    testing.check_task(built[name])


@pytest.mark.parametrize("name", ["darcy", "poisson", "poisson_fixed_lowres"])
def test_forward_jacobian_matches_central_differences(x64, name):
    task = tasks.get(name, resolution=8, num_sensors=10)
    g = np.linspace(0, 1, 8)
    x = jnp.asarray(6.0 + 3.0 * np.sin(2 * np.pi * g)[:, None] * np.cos(np.pi * g)[None, :])[None]
    jac = np.asarray(jax.jacfwd(task.forward)(x)).reshape(task.num_observations, -1)
    rng = np.random.default_rng(0)
    for _ in range(3):
        v = jnp.asarray(rng.standard_normal(x.shape))
        h = 1e-5
        fd = (task.forward(x + h * v) - task.forward(x - h * v)) / (2 * h)
        np.testing.assert_allclose(jac @ np.asarray(v).ravel(), fd, rtol=1e-6, atol=1e-10)


def test_likelihood_misfit_and_evaluation_field(built, key):
    task = built["darcy"]
    x = task.prior.sample(key)
    y = task.simulate(jr.fold_in(key, 1), x)
    r = (y - task.forward(x)) / task.noise_std
    expected = -0.5 * jnp.sum(r**2) - r.size * jnp.log(task.noise_std) - 0.5 * r.size * jnp.log(2 * jnp.pi)
    np.testing.assert_allclose(task.log_likelihood(x, y), expected, rtol=1e-5)
    np.testing.assert_allclose(task.misfit(x, y), jnp.mean(r**2), rtol=1e-5)
    blurred = x + 2.0 * jr.normal(key, x.shape)
    assert set(np.unique(task.evaluation_field(blurred))) <= {3.0, 12.0}
    np.testing.assert_array_equal(task.evaluation_field(x), x)
    smooth = built["poisson"].prior.sample(key)
    np.testing.assert_array_equal(built["poisson"].evaluation_field(smooth), smooth)


def published_postprocess(x, low, high):
    """PosteriorBench's `ModelNormalizer.apply_postprocess` (one binary field), in NumPy:
    torch.where(x > (low + high) / 2, high, low)."""
    threshold = (low + high) / 2
    return np.where(x > threshold, high, low).astype(x.dtype)


def test_binary_projection_is_the_published_postprocess():
    x = np.array([-np.inf, -7.5, 3.0, 7.4999, 7.5, 7.5001, 12.0, 23.5, np.inf, np.nan], np.float32)
    got = np.asarray(base.binary_projection(jnp.asarray(x), (3.0, 12.0)))
    np.testing.assert_array_equal(got, published_postprocess(x, 3.0, 12.0))
    assert got[4] == 3.0 and got[-1] == 3.0  # the midpoint and a NaN go to the low value, as published
    assert got.dtype == np.float32


def test_bad_shapes_are_named(built):
    task = built["poisson_fixed"]
    with pytest.raises(ValueError, match=r"x: expected shape \(1, 16, 16\)"):
        task.forward(jnp.zeros((RES, RES)))
    with pytest.raises(ValueError, match="y_obs"):
        task.log_likelihood(jnp.zeros(task.unknown_shape), jnp.zeros(3))
    with pytest.raises(ValueError, match="num"):
        task.cases(0, 0)


def test_config_hash_tracks_configuration():
    a = tasks.get("poisson_fixed", resolution=RES)
    assert a.config_hash() == tasks.get("poisson_fixed", resolution=RES).config_hash()
    assert a.config_hash() != tasks.get("poisson_fixed", resolution=RES, noise_std=2e-4).config_hash()
    assert a.config_hash() != tasks.get("poisson_fixed_lowres", resolution=RES).config_hash()


def test_published_prior_statistics():
    assert tasks.get("darcy", resolution=RES).field_stats == (7.5, 4.5)
    # the published Poisson training set has std 0.2719
    assert abs(tasks.get("poisson", resolution=128).field_stats[1] - 0.2719) < 0.005


# small options per registered task; a task registered without an entry here fails the test below
SMALL_OPTIONS = {
    **{name: dict(resolution=RES, num_sensors=24) for name in CORE},
    "ccs": dict(nz=8, nr=24, years=0.5, pressure_steps=2, wells=(0, 10)),
    "ltmi": dict(resolution=16, pooled_size=8),
    "ltmi_full": dict(resolution=16),
    **{name: dict(resolution=16) for name in ("interface_potential", "interface_meltpool")},
    "interface_transport": dict(resolution=32, frames=1),
    **{
        name: dict(resolution=32)
        for name in ("darcy_field", "poisson_field", "helmholtz_field", "heat_field")
        + ("reaction_diffusion_field", "burgers_field", "navier_stokes_field")
    },
}


def test_every_registered_task_names_its_channels_with_units():
    assert sorted(SMALL_OPTIONS) == tasks.names(), "add small options for the new task here"
    for name in tasks.names():
        task = tasks.get(name, **SMALL_OPTIONS[name])
        assert len(task.channels) == task.unknown_shape[0], name
        for channel in task.channels:
            assert isinstance(channel, tasks.Channel) and channel.name and channel.unit, (name, channel)
            assert channel.label == f"{channel.name} [{channel.unit}]"
    darcy = tasks.get("darcy", resolution=8, num_sensors=4)
    fields = {f.name: getattr(darcy, f.name) for f in dataclasses.fields(darcy)}
    with pytest.raises(ValueError, match="one Channel per channel"):
        tasks.Task(**{**fields, "channels": (tasks.Channel("a", "-"),) * 2})
    with pytest.raises(ValueError, match="both non-empty"):
        tasks.Task(**{**fields, "channels": (tasks.Channel("a", ""),)})
