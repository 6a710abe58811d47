"""Time-dependent periodic solvers: heat, reaction-diffusion, Burgers, Navier-Stokes.

Numerics are checked against mathematics: exact solutions (heat, Taylor-Green),
conservation laws, the Fisher-KPP front speed, the Allen-Cahn energy law,
temporal convergence orders by regression on log-error vs log-dt, and
gradients by `jax.test_util.check_grads` in float64.
"""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jax.test_util import check_grads

from posteriorjax.grids import Grid
from posteriorjax.physics import burgers, heat, spectral
from posteriorjax.physics import navier_stokes as ns
from posteriorjax.physics import reaction_diffusion as rd


def smooth_field(key, n, *, modes=3, amplitude=1.0, dtype=None):
    """Random trigonometric field with |m| <= modes (band-limited, smooth)."""
    dtype = dtype or jnp.result_type(float)
    grid = Grid(n, bc="periodic")
    y, x = grid.mesh()
    k1, k2 = jr.split(key)
    m = np.arange(-modes, modes + 1)
    mx, my = np.meshgrid(m, m)
    phase = 2 * np.pi * (mx[..., None, None] * x + my[..., None, None] * y)
    a = jr.normal(k1, mx.shape, dtype) / (1 + mx**2 + my**2)
    b = jr.normal(k2, mx.shape, dtype) / (1 + mx**2 + my**2)
    u = jnp.einsum("ij,ijkl->kl", a, jnp.cos(phase)) + jnp.einsum("ij,ijkl->kl", b, jnp.sin(phase))
    u = u - u.mean()
    return (amplitude * u / jnp.max(jnp.abs(u))).astype(dtype)


def taylor_green(grid, t, nu):
    y, x = grid.mesh()
    k = 2 * np.pi
    return 2 * k * np.sin(k * x) * np.sin(k * y) * np.exp(-2 * nu * k**2 * t)


def order_fit(errors, dts):
    return np.polyfit(np.log(dts), np.log(errors), 1)[0]


# ----------------------------------------------------------------------------
# Heat


def test_heat_matches_exact_solution(x64):
    grid = Grid(16, bc="periodic")
    y, x = grid.mesh()
    alpha, T = 0.03, 0.5
    modes = [(1, 0, 1.0), (2, 3, -0.5), (0, 4, 0.25)]

    def exact(t):
        return sum(
            c * np.cos(2 * np.pi * (mx * x + my * y)) * np.exp(-alpha * 4 * np.pi**2 * (mx**2 + my**2) * t)
            for mx, my, c in modes
        )

    frames = heat.solve(jnp.asarray(exact(0.0)), grid, alpha=alpha, final_time=T, num_frames=5)
    expected = np.stack([exact(t) for t in np.linspace(0, T, 5)])
    np.testing.assert_allclose(frames, expected, atol=1e-14)
    assert float(heat.normalized_residual(frames, grid, alpha=alpha, final_time=T)) < 1e-14


# ----------------------------------------------------------------------------
# Navier-Stokes: Taylor-Green


@pytest.mark.parametrize("n", [16, 32])
def test_taylor_green_decay_to_round_off(x64, n):
    grid = Grid(n, bc="periodic")
    nu, T = 0.01, 0.5
    frames = ns.solve(
        jnp.asarray(taylor_green(grid, 0.0, nu)),
        grid,
        nu=nu,
        final_time=T,
        num_frames=6,
        forcing_amplitude=0.0,
    )
    expected = np.stack([taylor_green(grid, t, nu) for t in np.linspace(0, T, 6)])
    err = np.max(np.abs(np.asarray(frames) - expected)) / np.max(np.abs(expected))
    assert err < 1e-12


# ----------------------------------------------------------------------------
# Conservation of the mean


def test_mean_conserved(x64, key):
    grid = Grid(16, bc="periodic")
    u0 = smooth_field(key, 16) + 0.3
    for frames in (
        heat.solve(u0, grid, alpha=0.05, final_time=0.2, num_frames=4),
        burgers.solve(u0, grid, nu=0.02, final_time=0.2, num_frames=4),
        ns.solve(4.0 * u0, grid, nu=0.01, final_time=0.2, num_frames=4),
    ):
        means = np.asarray(spectral.mean(frames))
        np.testing.assert_allclose(means, means[0], atol=1e-13)
        assert np.max(np.abs(np.asarray(frames[-1] - frames[0]))) > 1e-3


# ----------------------------------------------------------------------------
# Reaction-diffusion: Fisher-KPP front speed, Allen-Cahn energy


def test_fisher_kpp_front_speed(x64):
    """A 1-D-like front approaches 2 sqrt(D r); the Bramson shift -3/(2 lambda) ln t is removed.

    Units: length sqrt(D/r) = 0.01, time 1/r; fitted over r t in [4, 16]
    (x(t) = c t - (3 / 2) sqrt(D/r) ln(r t) + const, Bramson 1983).
    """
    n, diffusivity, r, T = 128, 4e-4, 4.0, 4.0
    grid = Grid(n, bc="periodic")
    y, x = grid.mesh()
    ell = np.sqrt(diffusivity / r)
    u0 = 0.5 * (1 - np.tanh((np.abs(x - 0.1) - 0.1) / ell))
    frames = rd.solve(
        jnp.asarray(u0),
        grid,
        r=r,
        diffusivity=diffusivity,
        final_time=T,
        num_frames=33,
        reaction="fisher_kpp",
        steps_per_frame=10,
    )
    profiles = np.asarray(frames).mean(axis=1)
    xs = grid.points()
    start = int(0.1 * n)
    positions = []
    for p in profiles:
        i = np.nonzero(p[start:] < 0.5)[0][0] + start
        positions.append(xs[i - 1] + (p[i - 1] - 0.5) / (p[i - 1] - p[i]) * (xs[i] - xs[i - 1]))
    tau = r * np.linspace(0, T, 33)
    sel = tau >= 4
    shifted = np.asarray(positions)[sel] + 1.5 * ell * np.log(tau[sel])
    speed = np.polyfit(tau[sel] / r, shifted, 1)[0]
    assert abs(speed / (2 * np.sqrt(diffusivity * r)) - 1) < 0.02


def test_allen_cahn_energy_decreases(x64, key):
    grid = Grid(32, bc="periodic")
    u0 = smooth_field(key, 32, modes=4, amplitude=0.8)
    r = 2.0
    frames = rd.solve(u0, grid, r=r, final_time=0.8, num_frames=9)
    energy = np.asarray(rd.energy(frames, grid, r=r))
    assert np.all(np.diff(energy) < 0)


def test_reaction_flows_solve_their_odes(x64):
    u = jnp.linspace(-1.5, 1.5, 7)
    for reaction in rd.REACTIONS:
        uu = u if reaction == "allen_cahn" else jnp.abs(u) / 2
        t = 0.3

        def flow_at(s, v, reaction=reaction):
            return rd.reaction_flow(v, 2.0, s, reaction)

        deriv = jax.vmap(jax.grad(flow_at), (None, 0))(t, uu)
        flow = rd.reaction_flow(uu, 2.0, t, reaction)
        np.testing.assert_allclose(deriv, rd.reaction_term(flow, 2.0, reaction), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------
# Temporal convergence order (error against a refined run)


def _order(solve, u0, steps, refine=16):
    ref = solve(u0, steps * refine)
    errors, dts = [], []
    for s in (steps, 2 * steps, 4 * steps):
        errors.append(float(jnp.linalg.norm(solve(u0, s) - ref) / jnp.linalg.norm(ref)))
        dts.append(1.0 / s)
    return order_fit(np.asarray(errors), np.asarray(dts)), errors


def test_convergence_order_strang(x64, key):
    grid = Grid(16, bc="periodic")
    u0 = smooth_field(key, 16, modes=3, amplitude=0.9)

    def solve(u, s):
        frames = rd.solve(u, grid, r=4.0, final_time=0.5, num_frames=2, steps_per_frame=s)
        return frames[-1]

    p, errors = _order(solve, u0, 4)
    assert abs(p - rd.ORDER) < 0.25, (p, errors)


def test_convergence_order_burgers(x64, key):
    grid = Grid(16, bc="periodic")
    u0 = smooth_field(key, 16, modes=3, amplitude=1.0)

    def solve(u, s):
        return burgers.solve(u, grid, nu=0.01, final_time=0.2, num_frames=2, steps_per_frame=s)[-1]

    p, errors = _order(solve, u0, 8)
    assert abs(p - burgers.ORDER) < 0.35, (p, errors)


@pytest.mark.parametrize("scheme,steps", [("ifrk4", 8), ("cn_euler", 64)])
def test_convergence_order_navier_stokes(x64, key, scheme, steps):
    grid = Grid(16, bc="periodic")
    w0 = smooth_field(key, 16, modes=3, amplitude=4.0)

    def solve(w, s):
        return ns.solve(w, grid, nu=0.01, final_time=0.2, num_frames=2, scheme=scheme, steps_per_frame=s)[-1]

    p, errors = _order(solve, w0, steps)
    assert abs(p - ns.ORDER[scheme]) < 0.35, (p, errors)


# ----------------------------------------------------------------------------
# Independent reference: the method-of-lines ODE integrated by diffrax (Dopri8, adaptive)


@pytest.mark.parametrize("name", ["burgers", "navier_stokes"])
def test_frames_match_adaptive_diffrax_reference(x64, key, name):
    diffrax = pytest.importorskip("diffrax")
    grid = Grid(16, bc="periodic")
    T, F = 0.3, 4
    if name == "burgers":
        u0 = smooth_field(key, 16, amplitude=1.5)
        equation = burgers.BurgersEquation(grid, jnp.asarray(0.02))
        frames = burgers.solve(u0, grid, nu=0.02, final_time=T, num_frames=F)
    else:
        u0 = smooth_field(key, 16, amplitude=6.0)
        f_hat = spectral.rfft2(ns.forcing(grid, 0.1, u0.dtype))
        equation = ns.VorticityEquation(grid, jnp.asarray(0.02), f_hat)
        frames = ns.solve(u0, grid, nu=0.02, final_time=T, num_frames=F)

    def rhs(t, u, args):
        u_hat = spectral.rfft2(u)
        return spectral.irfft2(equation.linear() * u_hat + equation.nonlinear(u_hat), 16)

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Dopri8(),
        t0=0.0,
        t1=T,
        dt0=1e-3,
        y0=u0,
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, T, F)),
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-11),
        max_steps=100_000,
    )
    err = jnp.max(jnp.abs(frames - sol.ys)) / jnp.max(jnp.abs(sol.ys))
    assert float(err) < 1e-6  # the IFRK4 time error at the default CFL step


# ----------------------------------------------------------------------------
# Gradients through short trajectories (float64)


def _short_solvers(grid):
    common = dict(final_time=0.05, num_frames=3)
    return {
        "heat": lambda u, p: heat.solve(u, grid, alpha=p, **common),
        "reaction_diffusion": lambda u, p: rd.solve(u, grid, r=p, steps_per_frame=2, **common),
        "burgers": lambda u, p: burgers.solve(u, grid, nu=p, steps_per_frame=2, **common),
        "navier_stokes": lambda u, p: ns.solve(u, grid, nu=p, steps_per_frame=2, **common),
    }


@pytest.mark.parametrize("name", ["heat", "reaction_diffusion", "burgers", "navier_stokes"])
def test_gradients(x64, key, name):
    grid = Grid(8, bc="periodic")
    solve = _short_solvers(grid)[name]
    u0 = smooth_field(key, 8, modes=2, amplitude=0.8)
    weights = jr.normal(jr.fold_in(key, 1), (3, 8, 8))
    param = jnp.asarray(0.05 if name != "reaction_diffusion" else 1.5)

    @jax.jit
    def loss(u, p):
        return jnp.sum(weights * solve(u, p))

    check_grads(loss, (u0, param), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
    jac = jax.jacfwd(lambda u: solve(u, param)[-1])(u0)
    assert jac.shape == (8, 8, 8, 8) and bool(jnp.all(jnp.isfinite(jac)))


def test_heat_adjoint_identity(x64, key):
    """The heat propagator is self-adjoint: grad of <v, S u> w.r.t. u is S v."""
    grid = Grid(16, bc="periodic")
    u, v = smooth_field(key, 16), smooth_field(jr.fold_in(key, 1), 16)

    def final(w):
        return heat.solve(w, grid, alpha=0.02, final_time=0.3, num_frames=2)[-1]

    g = jax.grad(lambda w: jnp.vdot(v, final(w)))(u)
    np.testing.assert_allclose(g, final(v), atol=1e-13)


# ----------------------------------------------------------------------------
# vmap over initial conditions and parameters


@pytest.mark.parametrize("name", ["heat", "reaction_diffusion", "burgers", "navier_stokes"])
def test_vmap_matches_loop(key, name):
    grid = Grid(16, bc="periodic")
    solve = _short_solvers(grid)[name]
    u0s = jnp.stack([smooth_field(jr.fold_in(key, i), 16, amplitude=0.8) for i in range(3)])
    params = jnp.asarray([0.02, 0.05, 0.1]) * (30 if name == "reaction_diffusion" else 1)
    batched = jax.jit(jax.vmap(solve))(u0s, params)
    single = jax.jit(solve)
    looped = jnp.stack([single(u, p) for u, p in zip(u0s, params, strict=True)])
    assert batched.shape == (3, 3, 16, 16) and batched.dtype == jnp.float32
    np.testing.assert_allclose(batched, looped, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------
# Bad input


ALL = {
    "heat": lambda u, g, **kw: heat.solve(u, g, alpha=kw.pop("p", 0.1), **kw),
    "reaction_diffusion": lambda u, g, **kw: rd.solve(u, g, r=kw.pop("p", 1.0), **kw),
    "burgers": lambda u, g, **kw: burgers.solve(u, g, nu=kw.pop("p", 0.01), **kw),
    "navier_stokes": lambda u, g, **kw: ns.solve(u, g, nu=kw.pop("p", 0.01), **kw),
}


@pytest.mark.parametrize("name", list(ALL))
def test_bad_input(name):
    solve = ALL[name]
    grid = Grid(16, bc="periodic")
    u0 = jnp.zeros((16, 16))
    with pytest.raises(ValueError, match="finite"):
        solve(u0.at[3, 4].set(jnp.nan), grid)
    with pytest.raises(ValueError, match="> 0"):
        solve(u0, grid, p=0.0)
    with pytest.raises(ValueError, match="> 0"):
        solve(u0, grid, p=-1.0)
    with pytest.raises(ValueError, match="final_time"):
        solve(u0, grid, final_time=0.0)
    with pytest.raises(ValueError, match="final_time"):
        solve(u0, grid, final_time=float("inf"))
    for frames in (0, -3, 1):
        with pytest.raises(ValueError, match="num_frames"):
            solve(u0, grid, num_frames=frames)
    with pytest.raises(ValueError, match="shape"):
        solve(jnp.zeros((8, 8)), grid)
    with pytest.raises(ValueError, match="periodic"):
        solve(u0, Grid(16, bc="dirichlet"))
    with pytest.raises(Exception, match="finite"):
        jax.jit(lambda u: solve(u, grid))(u0.at[0, 0].set(jnp.inf))
    with pytest.raises(Exception, match="> 0"):
        jax.jit(lambda p: solve(u0, grid, p=p))(jnp.asarray(-0.5))


@pytest.mark.parametrize("name", ["burgers", "navier_stokes"])
def test_dealiasing_grid_and_cfl_errors(name):
    solve = ALL[name]
    for n in (6, 15):
        with pytest.raises(ValueError, match="dealias"):
            solve(jnp.zeros((n, n)), Grid(n, bc="periodic"))
    grid = Grid(16, bc="periodic")
    big = 100.0 * jnp.asarray(taylor_green(grid, 0.0, 0.0), jnp.float32)
    with pytest.raises(ValueError, match="max_speed"):
        solve(big, grid)
    with pytest.raises(Exception, match="max_speed"):
        jax.jit(lambda u: solve(u, grid))(big)


def test_bad_options():
    grid = Grid(16, bc="periodic")
    u0 = jnp.zeros((16, 16))
    with pytest.raises(ValueError, match="reaction"):
        rd.solve(u0, grid, r=1.0, reaction="gray_scott")
    with pytest.raises(ValueError, match="scheme"):
        ns.solve(u0, grid, nu=0.01, scheme="euler")
    with pytest.raises(ValueError, match="steps_per_frame"):
        burgers.solve(u0, grid, nu=0.01, steps_per_frame=0)
    with pytest.raises(ValueError, match="diffusivity"):
        rd.solve(u0, grid, r=1.0, diffusivity=0.0)
