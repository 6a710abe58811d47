"""2-D scalar viscous Burgers equation on the periodic square, dealiased pseudo-spectral.

Equation (x in [0, L)^2 periodic; u is a scalar advected along (1, 1)):

    u_t + u (u_x + u_y) = nu lap u   <=>   u_t + (d_x + d_y)(u^2 / 2) = nu lap u.

Space: Fourier pseudo-spectral in the conservative form, with the 2/3 rule:
the quadratic term is formed from the resolved band only,
N(u_hat) = -(i/2)(kx + ky) P[FFT((IFFT(P u_hat))^2)] with P the 2/3 mask, so
the k = 0 mode (the mean) is conserved exactly.

Time: integrating-factor RK4 with exact diffusion (`spectral.ifrk4`), order 4.
The step obeys a CFL bound on the resolved advection:
the advecting velocity is u (1, 1), whose largest Fourier eigenvalue
|u| (|kx| + |ky|) <= 2 |u| k_c with k_c = (2 pi / L)(n / 3), so

    dt = cfl * h / (2 * max_speed),   h = L / n,

which for cfl <= 1.35 keeps dt |lambda| inside the RK4 imaginary-axis
stability bound 2 sqrt(2). `max_speed` is a static bound on max|u|; viscous
Burgers obeys a maximum principle (max|u(t)| <= max|u0|), so checking
max|u0| <= max_speed at the boundary guards the whole run. Fixed steps under
`lax.scan` (static step count: `vmap` stays in lockstep; see
`posteriorjax.physics.spectral`).

Shapes: u0 `(n, n)` `[y, x]` -> frames `(num_frames, n, n)` at t_h = h T / (num_frames - 1).
`nu` is an array (vmap it); times, steps, `max_speed`, `cfl` are static.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax import checks
from posteriorjax.grids import Grid
from posteriorjax.physics import spectral

ORDER = 4
DEFAULT_MAX_SPEED = 5.0
DEFAULT_CFL = 0.5


class BurgersEquation(spectral.AbstractSemilinearEquation):
    """u_hat' = nu L u_hat + N(u_hat) with N the dealiased conservative advection."""

    grid: Grid = eqx.field(static=True)
    nu: jax.Array

    def linear(self):
        return self.nu * spectral.laplacian_symbol(self.grid, self.nu.dtype)

    def nonlinear(self, u_hat):
        ky, kx = spectral.wavenumbers(self.grid, self.nu.dtype)
        mask = spectral.dealias(self.grid)
        u = spectral.irfft2(jnp.where(mask, u_hat, 0), self.grid.n)
        flux_hat = jnp.where(mask, spectral.rfft2(u * u), 0)
        return -0.5j * (kx + ky) * flux_hat


def time_step(grid: Grid, *, max_speed: float, cfl: float) -> float:
    """CFL step cfl * h / (2 max_speed)."""
    return cfl * grid.spacing / (2.0 * max_speed)


def solve(
    u0,
    grid: Grid,
    *,
    nu,
    final_time: float = 0.35,
    num_frames: int = 15,
    max_speed: float = DEFAULT_MAX_SPEED,
    cfl: float = DEFAULT_CFL,
    steps_per_frame: int | None = None,
) -> jax.Array:
    """Frames `(num_frames, n, n)` of u_t + u (u_x + u_y) = nu lap u.

    Args:
      u0: initial state `(n, n)`, finite, with max|u0| <= max_speed.
      grid: periodic `Grid` with even n >= 8 (2/3-rule dealiasing).
      nu: viscosity (scalar array, > 0).
      final_time: T > 0 (static).
      num_frames: frames >= 2 at t_h = h T / (num_frames - 1) (static).
      max_speed: static bound on max|u| used by the CFL step.
      cfl: Courant number of `time_step` (static; <= 1.35 for RK4 stability).
      steps_per_frame: override the CFL-derived number of steps per frame.
    """
    spectral.check_grid(grid, dealias=True)
    final_time, num_frames = spectral.check_times(final_time, num_frames)
    max_speed = checks.positive("max_speed", max_speed)
    cfl = checks.positive("cfl", cfl)
    frame_dt = final_time / (num_frames - 1)
    if steps_per_frame is None:
        steps_per_frame = spectral.steps_for(frame_dt, time_step(grid, max_speed=max_speed, cfl=cfl))
    steps_per_frame = checks.positive_int("steps_per_frame", steps_per_frame)
    u0 = spectral.check_state(u0, grid)
    u0 = spectral.check_bound(u0, jnp.max(jnp.abs(u0)), max_speed, "u0", "max|u0|")
    nu = checks.positive_scalar("nu", nu, u0.dtype)
    equation = BurgersEquation(grid, nu)
    step = spectral.ifrk4(equation, frame_dt / steps_per_frame)
    return spectral.rollout(
        step,
        spectral.rfft2(u0),
        steps_per_frame=steps_per_frame,
        num_frames=num_frames,
        observe=lambda u_hat: spectral.irfft2(u_hat, grid.n),
    )


def _terms(frames, grid: Grid, nu, final_time: float):
    frames = jnp.asarray(frames)
    final_time, num_frames = spectral.check_times(final_time, frames.shape[0])
    dt = final_time / (num_frames - 1)
    mid = 0.5 * (frames[1:] + frames[:-1])
    time_term = (frames[1:] - frames[:-1]) / dt
    ky, kx = spectral.wavenumbers(grid, frames.dtype)
    mid_hat = spectral.rfft2(mid)
    grad_sum = spectral.irfft2(1j * (kx + ky) * mid_hat, grid.n)
    mask = spectral.dealias(grid)
    advection = spectral.irfft2(jnp.where(mask, spectral.rfft2(mid * grad_sum), 0), grid.n)
    diffusion = nu * spectral.irfft2(-(kx**2 + ky**2) * mid_hat, grid.n)
    return time_term, advection, diffusion


def residual(frames, grid: Grid, *, nu, final_time: float = 0.35) -> jax.Array:
    """Time-centred residual between frames, `(num_frames - 1, n, n)`.

    (u_{h+1} - u_h) / dt + P[u_mid (d_x + d_y) u_mid] - nu lap u_mid with
    u_mid = (u_h + u_{h+1}) / 2, dt = T / (num_frames - 1), spectral derivatives
    and P the 2/3 mask: O(dt^2) for an exact trajectory (the PDE-OBS
    quality-report residual).
    """
    time_term, advection, diffusion = _terms(frames, grid, nu, final_time)
    return time_term + advection - diffusion


def normalized_residual(frames, grid: Grid, *, nu, final_time: float = 0.35) -> jax.Array:
    """rms(residual) / (rms(u_t) + rms(advection) + rms(nu lap u))."""
    terms = _terms(frames, grid, nu, final_time)
    return spectral.normalized_residual(terms[0] + terms[1] - terms[2], *terms)
