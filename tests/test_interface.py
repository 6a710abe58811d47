"""Interface tasks and the advection-diffusion solver: closed forms, residuals, derivatives."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.grids import Grid
from posteriorjax.metrics import geometry as geo
from posteriorjax.physics import advection_diffusion as ad
from posteriorjax.tasks import interface

# until `interface` is on the import line of tasks/__init__.py, importing it registers the tasks
N = 8


def test_pure_diffusion_decays_a_sine_mode_as_imex_euler(x64):
    grid = Grid(N)
    x = (np.arange(N) + 1) * grid.spacing
    mode = jnp.asarray(np.sin(np.pi * x)[None, :] * np.sin(2 * np.pi * x)[:, None])
    lam = (4 / grid.spacing**2) * (np.sin(np.pi * grid.spacing / 2) ** 2 + np.sin(np.pi * grid.spacing) ** 2)
    kappa, t, steps = 0.1, 0.2, 10
    frames = ad.solve_transient(
        mode, ad.uniform_velocity(grid, 0.0, 0.0), kappa, grid, t_final=t, num_steps=steps, num_frames=2
    )
    dt = t / steps
    for k, frame in enumerate(frames):
        np.testing.assert_allclose(frame, mode * (1 + dt * kappa * lam) ** (-5 * (k + 1)), atol=1e-13)


def test_transient_reaches_the_steady_solution_and_residual_vanishes(x64):
    grid = Grid(N)
    b = ad.uniform_velocity(grid, 2.0, -1.0)
    u = ad.solve_steady(b, 0.5, grid, 1.0)
    assert float(jnp.max(jnp.abs(ad.residual_steady(u, b, 0.5, grid)))) < 1e-9
    frames = ad.solve_transient(jnp.zeros(grid.shape), b, 0.5, grid, f=1.0, t_final=3.0, num_steps=100)
    np.testing.assert_allclose(frames[-1], u, atol=1e-8 * float(jnp.max(u)))


def test_upwind_is_exact_on_linear_profiles():
    grid = Grid(8)
    x = (np.arange(8) + 1) * grid.spacing
    u = jnp.asarray(np.broadcast_to(x[None, :], (8, 8)))
    # interior columns see the exact slope; the inflow column sees the boundary value 0
    adv = ad.advection(u, ad.uniform_velocity(grid, 3.0, 0.0), grid)
    np.testing.assert_allclose(adv[:, 1:], 3.0, rtol=1e-5)
    np.testing.assert_allclose(adv[:, 0], 3.0 * x[0] / grid.spacing, rtol=1e-5)


@pytest.mark.slow
def test_steady_derivative_matches_finite_differences(x64):
    grid = Grid(N)
    f = jnp.asarray(np.random.default_rng(0).uniform(size=grid.shape))

    def fn(s):
        return ad.solve_steady(ad.uniform_velocity(grid, 3.0 * s, 1.0), 0.7, grid, f)[4:9, 5].sum()

    h = 1e-5
    fd = (fn(1.0 + h) - fn(1.0 - h)) / (2 * h)
    assert float(jax.jacfwd(fn)(1.0)) == pytest.approx(float(fd), rel=1e-6)
    assert float(jax.grad(fn)(1.0)) == pytest.approx(float(fd), rel=1e-6)


def test_unstable_step_and_bad_arguments():
    grid = Grid(N)
    b = ad.uniform_velocity(grid, 10.0, 0.0)
    with pytest.raises(ValueError, match="stability limit"):
        ad.solve_transient(jnp.zeros(grid.shape), b, 0.1, grid, t_final=1.0, num_steps=10)
    with pytest.raises(ValueError, match="velocity"):
        ad.solve_steady(jnp.zeros((2, 3, 3)), 1.0, grid)
    with pytest.raises(ValueError, match="kappa"):
        ad.solve_steady(b, 0.0, grid)
    with pytest.raises(ValueError, match="regime"):
        interface.build(regime="battery")
    with pytest.raises(ValueError, match="frames"):
        interface.build(regime="potential", frames=-1)


def test_circle_indicator_area_and_radius(x64):
    grid = Grid(64)
    c = jnp.zeros(17).at[0].set(0.3).at[3].set(0.05)
    theta = jnp.linspace(0, 2 * jnp.pi, 7)
    np.testing.assert_allclose(interface.radius(c, theta), 0.3 + 0.05 * jnp.cos(3 * theta), rtol=1e-12)
    circle = jnp.zeros(17).at[0].set(0.3)
    area = float(jnp.sum(interface.indicator(circle, grid)) * grid.spacing**2)
    assert area == pytest.approx(np.pi * 0.3**2, rel=0.02)


@functools.cache
def _tasks():
    return {
        "interface_potential": tasks.get("interface_potential", resolution=N),
        "interface_meltpool": tasks.get("interface_meltpool", resolution=N, frames=2),
        "interface_transport": tasks.get("interface_transport", resolution=N, frames=2, num_sensors=6),
    }


@pytest.mark.parametrize("name", ["interface_potential", "interface_meltpool", "interface_transport"])
def test_interface_tasks_shapes_residuals_and_geometry(name, x64):
    task = _tasks()[name]
    assert name in tasks.names()
    assert task.unknown_shape == (17, 1, 1)
    x = task.prior.mean.reshape(task.unknown_shape).astype(jnp.float64)
    u = task.solve(x)
    res = task.physics.residual(x, u)
    assert float(jnp.max(jnp.abs(res))) < 1e-6 * (1 + float(jnp.max(jnp.abs(u))))
    fn, c0, cov = interface.observation_map(task)
    g = geo.analyze(jax.jit(fn), jnp.asarray(c0, jnp.float64), noise_cov=cov)
    p = task.num_observations
    assert g.V.shape == (17, 17) and g.num_retained + g.num_below == 17
    assert np.sum(g.singular_values == 0) >= max(0, 17 - p)
    assert np.all(np.asarray(task.noise.std) > 0)


def test_potential_auxiliary_channels_are_area_and_energy(x64):
    task = _tasks()["interface_potential"]
    x = task.prior.mean.reshape(task.unknown_shape).astype(jnp.float64)
    y = task.forward(x)
    u = task.solve(x)
    h2 = task.grid.spacing**2
    assert float(y[-2]) == pytest.approx(float(jnp.sum(u[1]) * h2), rel=1e-10)
    # energy: integral of f u = u . A u h^2 > 0 (A SPD)
    assert float(y[-1]) > 0
