"""The seven observation-pattern field tasks: registry, shapes, physics, observation, regimes."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import observations, tasks
from posteriorjax.tasks import fields

RECOVERY = ["darcy_field", "poisson_field", "helmholtz_field"]
FORECAST = ["heat_field", "reaction_diffusion_field", "burgers_field", "navier_stokes_field"]
N = 16


def test_registered():
    assert set(RECOVERY + FORECAST) <= set(tasks.names())


@pytest.mark.parametrize("name", RECOVERY + FORECAST)
def test_shapes_forward_and_likelihood(name, key):
    task = tasks.get(name, resolution=N)
    assert task.unknown_shape == (1, N, N)
    assert task.state_shape == ((1, N, N) if name in RECOVERY else (4, N, N))
    assert task.num_observations == 128  # R50 at 16 x 16
    x = task.prior.sample(key)
    u = jax.jit(lambda z: task.solve(z))(x)
    assert bool(jnp.all(jnp.isfinite(u)))
    y = task.simulate(jr.fold_in(key, 1), x)
    assert y.shape == (128,)
    assert np.isfinite(float(task.log_likelihood(x, y)))
    res = task.physics.residual(x, u)
    assert bool(jnp.all(jnp.isfinite(res)))


@pytest.mark.parametrize("name", RECOVERY)
def test_recovery_residual_small(name, key, x64):
    task = tasks.get(name, resolution=N)
    x = task.prior.sample(key).astype(jnp.float64)
    u = task.solve(x)
    res = task.physics.residual(x, u)
    assert float(jnp.max(jnp.abs(res))) < 1e-6 * float(jnp.max(jnp.abs(u))) * N**2


@pytest.mark.parametrize("name", FORECAST)
def test_forecast_observes_initial_frame_only(name, key):
    task = tasks.get(name, resolution=N, regime="high")
    x = task.prior.sample(key)
    u = task.solve(x)
    scale = task.physics.scale
    np.testing.assert_allclose(u[0], scale * x[0], rtol=1e-5, atol=1e-5)
    inner = observations.pattern("R50", task.grid, seed=fields.PATTERN_SEED, record=0)
    np.testing.assert_allclose(task.forward(x), inner(scale * x[0]), rtol=1e-5, atol=1e-5)
    assert float(jnp.linalg.norm(u[3] - u[0])) > 1e-3 * float(jnp.linalg.norm(u[0]))


def test_forecast_frames_match_full_trajectory(key):
    task = tasks.get("burgers_field", resolution=N)
    x = task.prior.sample(key)
    full = fields.burgers.solve(x[0], task.grid, nu=0.015, final_time=0.35)
    np.testing.assert_allclose(task.solve(x), full[:4], rtol=1e-5, atol=1e-5)


def test_darcy_coefficient_range(key):
    task = tasks.get("darcy_field", resolution=N, regime="high")
    a, f = task.physics._source(task.prior.sample(key)[0])
    np.testing.assert_allclose([float(a.min()), float(a.max())], [32**-0.5, 32**0.5], rtol=1e-5)
    assert abs(float(f.mean())) < 1e-6


def test_regimes_and_even_split(key):
    assert fields.regime_counts(2000) == (667, 667, 666)
    assert fields.regime_counts(7) == (3, 2, 2)
    cases, regime = fields.regime_cases("heat_field", 0, 4, resolution=16, pattern="R80")
    assert cases.x_true.shape == (4, 1, 16, 16) and cases.u_true.shape == (4, 4, 16, 16)
    assert cases.y_obs.shape == (4, 205)
    np.testing.assert_array_equal(regime, [0, 0, 1, 2])
    decay = jnp.sqrt(jnp.mean(cases.u_true[:, 3] ** 2, (1, 2)))
    assert float(decay[0]) > float(decay[-1])  # low diffusivity keeps more of the field
    params = [tasks.get("navier_stokes_field", resolution=16, regime=r).physics for r in fields.REGIMES]
    assert [p.parameter for p in params] == [0.02, 0.008, 0.0025]
    assert [p.scale for p in params] == [2.0, 3.0, 4.0]


def test_bad_options():
    with pytest.raises(ValueError, match="regime"):
        tasks.get("heat_field", resolution=16, regime="extreme")
    with pytest.raises(ValueError, match="option"):
        tasks.get("heat_field", resolution=16, contrast=3.0)
    with pytest.raises(ValueError, match="pattern"):
        tasks.get("poisson_field", resolution=16, pattern="nonsense")
    with pytest.raises(ValueError, match="regime"):
        fields.regime_cases("heat_field", 0, 3, regime="low")
