"""Time-dependent periodic solvers: trajectories per second, ours vs the same scheme in NumPy.

Each record times one `jax.jit(jax.vmap(solve))` call on a batch of smooth
random initial states (the PDE-OBS smooth GRF, medium regime, full final time,
15 frames) and the identical scheme written with `numpy.fft` on the same batch
(vectorized over the batch axis, one Python loop over time steps, float32 like
ours: NumPy >= 2 transforms float32 in single precision), measured in the same
run. Heat is exact spectral propagation; reaction-diffusion is Strang splitting;
Burgers and Navier-Stokes are integrating-factor RK4 with the same CFL-derived
step counts as ours.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bench.common import best_time, record
from posteriorjax.grids import Grid, dealias_mask, fft_wavenumbers
from posteriorjax.physics import burgers, heat, spectral
from posteriorjax.physics import navier_stokes as ns
from posteriorjax.physics import reaction_diffusion as rd

NUM_FRAMES = 15


def _smooth_grf(rng, batch, n, ell=0.22):
    """White noise filtered by exp(-2 (pi ell)^2 |m|^2), mean 0, std 1 (PDE-OBS smooth_grf)."""
    m = np.fft.fftfreq(n, d=1.0 / n)
    filt = np.exp(-2 * (np.pi * ell) ** 2 * (m[:, None] ** 2 + m[None, :] ** 2))
    f = np.fft.ifft2(np.fft.fft2(rng.standard_normal((batch, n, n))) * filt).real
    f -= f.mean(axis=(-2, -1), keepdims=True)
    return f / f.std(axis=(-2, -1), keepdims=True)


def _symbols(n, dtype):
    ky, kx = (k.astype(dtype) for k in fft_wavenumbers(n, 1.0, real=True))
    return ky, kx, -(kx**2 + ky**2), dealias_mask(n, real=True)


def _np_rollout(step, state, steps_per_frame, to_physical):
    frames = [to_physical(state)]
    for _ in range(NUM_FRAMES - 1):
        for _ in range(steps_per_frame):
            state = step(state)
        frames.append(to_physical(state))
    return np.stack(frames, axis=1)


def _np_ifrk4(lin, nonlinear, dt):
    e_full, e_half = np.exp(lin * dt).astype(lin.dtype), np.exp(lin * dt / 2).astype(lin.dtype)

    def step(u):
        k1 = dt * nonlinear(u)
        k2 = dt * nonlinear(e_half * (u + k1 / 2))
        k3 = dt * nonlinear(e_half * u + k2 / 2)
        k4 = dt * nonlinear(e_full * u + e_half * k3)
        return e_full * u + (e_full * k1 + 2 * e_half * (k2 + k3) + k4) / 6

    return step


def numpy_heat(u0, alpha, final_time):
    n = u0.shape[-1]
    _, _, lap, _ = _symbols(n, u0.dtype)
    t = np.linspace(0, final_time, NUM_FRAMES, dtype=u0.dtype)
    prop = np.exp(alpha * lap[None] * t[:, None, None])
    return np.fft.irfft2(prop[None] * np.fft.rfft2(u0)[:, None], s=(n, n))


def numpy_reaction_diffusion(u0, r, diffusivity, final_time, steps_per_frame):
    n = u0.shape[-1]
    _, _, lap, _ = _symbols(n, u0.dtype)
    dt = final_time / (NUM_FRAMES - 1) / steps_per_frame
    decay = np.exp(diffusivity * lap * dt).astype(u0.dtype)
    half = u0.dtype.type(np.exp(-2 * r * dt / 2))

    def react(u):
        return u / np.sqrt(u * u + (1 - u * u) * half)

    def step(u):
        u = react(u)
        u = np.fft.irfft2(decay * np.fft.rfft2(u), s=(n, n))
        return react(u)

    return _np_rollout(step, u0, steps_per_frame, lambda u: u)


def numpy_burgers(u0, nu, final_time, steps_per_frame):
    n = u0.shape[-1]
    ky, kx, lap, mask = _symbols(n, u0.dtype)

    def nonlinear(u_hat):
        u = np.fft.irfft2(u_hat * mask, s=(n, n))
        return -0.5j * (kx + ky) * (np.fft.rfft2(u * u) * mask)

    dt = final_time / (NUM_FRAMES - 1) / steps_per_frame
    step = _np_ifrk4(nu * lap, nonlinear, dt)
    return _np_rollout(step, np.fft.rfft2(u0), steps_per_frame, lambda u: np.fft.irfft2(u, s=(n, n)))


def numpy_navier_stokes(w0, nu, final_time, steps_per_frame, amplitude=0.1):
    n = w0.shape[-1]
    ky, kx, lap, mask = _symbols(n, w0.dtype)
    k_sq = -lap
    inv = np.where(k_sq > 0, 1 / np.where(k_sq > 0, k_sq, 1), 0)
    y, x = Grid(n, bc="periodic").mesh()
    f = amplitude * (np.sin(2 * np.pi * (x + y)) + np.cos(2 * np.pi * (x + y)))
    f_hat = np.fft.rfft2(f.astype(w0.dtype))

    def nonlinear(w_hat):
        w_hat = w_hat * mask
        psi = w_hat * inv
        w = np.fft.irfft2(w_hat, s=(n, n))
        vx = np.fft.irfft2(1j * ky * psi, s=(n, n))
        vy = np.fft.irfft2(-1j * kx * psi, s=(n, n))
        adv = 1j * kx * np.fft.rfft2(vx * w) + 1j * ky * np.fft.rfft2(vy * w)
        return f_hat - adv * mask

    dt = final_time / (NUM_FRAMES - 1) / steps_per_frame
    step = _np_ifrk4(nu * lap, nonlinear, dt)
    return _np_rollout(step, np.fft.rfft2(w0), steps_per_frame, lambda w: np.fft.irfft2(w, s=(n, n)))


def _run(name, args, sizes, make):
    records = []
    for n in sizes:
        batch = (32 if n <= 64 else 16) if args.device else (4 if n <= 64 else 2)
        rng = np.random.default_rng(n)
        ours_fn, numpy_fn, u0, config = make(n, rng, batch)
        u0 = u0.astype(np.float32)
        u0_j = jnp.asarray(u0)
        ours = jax.jit(jax.vmap(ours_fn))
        t_ours = best_time(ours, u0_j, repeats=2)
        out = np.asarray(ours(u0_j))
        t_np = best_time(numpy_fn, u0, repeats=2, warmup=0)
        ref = numpy_fn(u0)
        diff = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
        records.append(
            record(
                f"{name}_{n}",
                "trajectories/s",
                batch / t_ours,
                batch / t_np,
                "same scheme in NumPy (numpy.fft, float32)",
                n=n,
                batch=batch,
                num_frames=NUM_FRAMES,
                max_rel_diff_vs_numpy=diff,
                dtype="float32",
                **config,
            )
        )
    return records


def bench_heat(args):
    def make(n, rng, batch):
        grid = Grid(n, bc="periodic")
        alpha, T = 0.02, 0.25
        return (
            lambda u: heat.solve(u, grid, alpha=alpha, final_time=T),
            lambda u: numpy_heat(u, alpha, T),
            _smooth_grf(rng, batch, n),
            dict(alpha=alpha, final_time=T, scheme="exact Fourier propagation"),
        )

    return _run("heat", args, (64, 128), make)


def bench_reaction_diffusion(args):
    def make(n, rng, batch):
        grid = Grid(n, bc="periodic")
        r, D, T = 1.5, 0.008, 0.8
        spf = spectral.steps_for(T / (NUM_FRAMES - 1), rd.DEFAULT_MAX_DT)
        return (
            lambda u: rd.solve(u, grid, r=r, diffusivity=D, final_time=T),
            lambda u: numpy_reaction_diffusion(u, r, D, T, spf),
            0.8 * _smooth_grf(rng, batch, n),
            dict(r=r, diffusivity=D, final_time=T, steps=spf * (NUM_FRAMES - 1), scheme="Strang"),
        )

    return _run("reaction_diffusion", args, (64, 128), make)


def bench_burgers(args):
    def make(n, rng, batch):
        grid = Grid(n, bc="periodic")
        nu, T = 0.015, 0.35
        dt = burgers.time_step(grid, max_speed=burgers.DEFAULT_MAX_SPEED, cfl=burgers.DEFAULT_CFL)
        spf = spectral.steps_for(T / (NUM_FRAMES - 1), dt)
        return (
            lambda u: burgers.solve(u, grid, nu=nu, final_time=T),
            lambda u: numpy_burgers(u, nu, T, spf),
            _smooth_grf(rng, batch, n),
            dict(nu=nu, final_time=T, steps=spf * (NUM_FRAMES - 1), scheme="IFRK4, CFL step"),
        )

    return _run("burgers", args, (64, 128), make)


def bench_navier_stokes(args):
    def make(n, rng, batch):
        grid = Grid(n, bc="periodic")
        nu, T = 0.008, 0.4
        dt = ns.time_step(grid, max_speed=ns.DEFAULT_MAX_SPEED, cfl=ns.DEFAULT_CFL)
        spf = spectral.steps_for(T / (NUM_FRAMES - 1), dt)
        return (
            lambda w: ns.solve(w, grid, nu=nu, final_time=T),
            lambda w: numpy_navier_stokes(w, nu, T, spf),
            3.0 * _smooth_grf(rng, batch, n),
            dict(nu=nu, final_time=T, steps=spf * (NUM_FRAMES - 1), scheme="IFRK4, CFL step"),
        )

    return _run("navier_stokes", args, (64, 128), make)


BENCHMARKS = {
    "heat": bench_heat,
    "reaction_diffusion": bench_reaction_diffusion,
    "burgers": bench_burgers,
    "navier_stokes": bench_navier_stokes,
}
