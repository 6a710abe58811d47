"""2-D incompressible Navier-Stokes in vorticity form on the periodic square.

Equation (x in [0, L)^2 periodic):

    w_t + v . grad w = nu lap w + f,   -lap psi = w,   v = (psi_y, -psi_x),
    f = A (sin 2 pi (x + y) / L + cos 2 pi (x + y) / L),   A = 0.1 by default

(on the unit square this is the forcing of the FNO / PDE-OBS Navier-Stokes
data). The stream function of the mean-free part of w is psi_hat = w_hat / |k|^2.

Space: Fourier pseudo-spectral, advection in the conservative form
div(v w) (equal to v . grad w since div v = 0), products formed from the 2/3
band and masked again (2/3 rule), so the mean of w is conserved exactly
(f has zero mean).

Time, ``scheme=``:
  * ``"ifrk4"`` (default): integrating-factor RK4, viscosity exact, order 4,
    with a CFL step dt = cfl * h / max_speed, where `max_speed` bounds
    max(|v_x| + |v_y|). Since the largest advective Fourier eigenvalue is
    (|v_x| + |v_y|) k_c with k_c = (2 pi / L)(n / 3), cfl <= 1.35 keeps
    dt |lambda| inside RK4's imaginary-axis bound 2 sqrt(2); the default 0.5
    leaves room for growth of the velocity during the run.
  * ``"cn_euler"``: Crank-Nicolson viscosity, forward-Euler advection and
    forcing, order 1, dt <= 1e-4 -- the FNO generator's scheme, for fidelity
    comparisons. It needs ~10-40x more steps than ``"ifrk4"`` at 128^2.

Fixed steps under `lax.scan` (static step count: `vmap` batches stay in
lockstep, `jacfwd` and checkpointed reverse mode work directly; see
`posteriorjax.physics.spectral`).

Shapes: w0 `(n, n)` `[y, x]` -> frames `(num_frames, n, n)` of vorticity at
t_h = h T / (num_frames - 1). `nu` and `forcing_amplitude` are arrays;
times, steps and bounds are static.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.grids import Grid
from posteriorjax.physics import spectral

ORDER = {"ifrk4": 4, "cn_euler": 1}
DEFAULT_MAX_SPEED = 4.0
DEFAULT_CFL = 0.5
FNO_DT = 1e-4


def forcing(grid: Grid, amplitude=0.1, dtype=jnp.float32) -> jax.Array:
    """f = A (sin 2 pi (x + y) / L + cos 2 pi (x + y) / L) on the grid, `(n, n)`."""
    y, x = grid.mesh()
    phase = 2.0 * np.pi * (x + y) / grid.length
    return jnp.asarray(amplitude, dtype) * jnp.asarray(np.sin(phase) + np.cos(phase), dtype)


def velocity(w, grid: Grid) -> tuple[jax.Array, jax.Array]:
    """Velocity (v_x, v_y) = (psi_y, -psi_x) with -lap psi = w; each `(..., n, n)`."""
    w = jnp.asarray(w)
    ky, kx = spectral.wavenumbers(grid, w.dtype)
    psi_hat = _psi_hat(spectral.rfft2(w), kx, ky)
    return spectral.irfft2(1j * ky * psi_hat, grid.n), spectral.irfft2(-1j * kx * psi_hat, grid.n)


def _psi_hat(w_hat, kx, ky):
    k_sq = kx**2 + ky**2
    # k = 0: the streamfunction's mean is free on the torus; 0 fixes it (and keeps 0 / 0 out of
    # the gradient)
    return jnp.where(k_sq > 0, w_hat / jnp.where(k_sq > 0, k_sq, 1.0), 0)


class VorticityEquation(spectral.AbstractSemilinearEquation):
    """w_hat' = nu L w_hat + N(w_hat), N = -P div(v w)^ + f_hat."""

    grid: Grid = eqx.field(static=True)
    nu: jax.Array
    forcing_hat: jax.Array

    def linear(self):
        return self.nu * spectral.laplacian_symbol(self.grid, self.nu.dtype)

    def nonlinear(self, w_hat):
        ky, kx = spectral.wavenumbers(self.grid, self.nu.dtype)
        mask = spectral.dealias(self.grid)
        w_hat = jnp.where(mask, w_hat, 0)
        psi_hat = _psi_hat(w_hat, kx, ky)
        n = self.grid.n
        w = spectral.irfft2(w_hat, n)
        vx = spectral.irfft2(1j * ky * psi_hat, n)
        vy = spectral.irfft2(-1j * kx * psi_hat, n)
        advection = 1j * kx * spectral.rfft2(vx * w) + 1j * ky * spectral.rfft2(vy * w)
        return self.forcing_hat - jnp.where(mask, advection, 0)


def time_step(grid: Grid, *, max_speed: float, cfl: float) -> float:
    """CFL step cfl * h / max_speed (max_speed bounds |v_x| + |v_y|)."""
    return cfl * grid.spacing / max_speed


def solve(
    w0,
    grid: Grid,
    *,
    nu,
    final_time: float = 0.4,
    num_frames: int = 15,
    forcing_amplitude=0.1,
    scheme: str = "ifrk4",
    max_speed: float = DEFAULT_MAX_SPEED,
    cfl: float = DEFAULT_CFL,
    max_dt: float | None = None,
    steps_per_frame: int | None = None,
) -> jax.Array:
    """Vorticity frames `(num_frames, n, n)` of w_t + v . grad w = nu lap w + f.

    Args:
      w0: initial vorticity `(n, n)`, finite; its velocity must satisfy
        max(|v_x| + |v_y|) <= max_speed.
      grid: periodic `Grid` with even n >= 8 (2/3-rule dealiasing).
      nu: viscosity (scalar array, > 0).
      final_time: T > 0 (static).
      num_frames: frames >= 2 at t_h = h T / (num_frames - 1) (static).
      forcing_amplitude: A in f (scalar array, >= 0; 0 switches forcing off).
      scheme: ``"ifrk4"`` (order 4, CFL step) or ``"cn_euler"`` (order 1, FNO).
      max_speed: static bound on max(|v_x| + |v_y|) used by the CFL step.
      cfl: Courant number (static).
      max_dt: optional cap on the step (default: none for ifrk4, 1e-4 for cn_euler).
      steps_per_frame: override the derived number of steps per frame.
    """
    spectral.check_grid(grid, dealias=True)
    checks.in_choices("scheme", scheme, tuple(ORDER))
    final_time, num_frames = spectral.check_times(final_time, num_frames)
    max_speed = checks.positive("max_speed", max_speed)
    cfl = checks.positive("cfl", cfl)
    if max_dt is None:
        max_dt = FNO_DT if scheme == "cn_euler" else float("inf")
    else:
        max_dt = checks.positive("max_dt", max_dt)
    frame_dt = final_time / (num_frames - 1)
    if steps_per_frame is None:
        dt = min(time_step(grid, max_speed=max_speed, cfl=cfl), max_dt)
        steps_per_frame = spectral.steps_for(frame_dt, dt)
    steps_per_frame = checks.positive_int("steps_per_frame", steps_per_frame)
    w0 = spectral.check_state(w0, grid, "w0")
    vx, vy = velocity(w0, grid)
    w0 = spectral.check_bound(w0, jnp.max(jnp.abs(vx) + jnp.abs(vy)), max_speed, "w0", "max(|v_x| + |v_y|)")
    nu = checks.positive_scalar("nu", nu, w0.dtype)
    amplitude = checks.positive_scalar("forcing_amplitude", forcing_amplitude, w0.dtype, allow_zero=True)
    equation = VorticityEquation(grid, nu, spectral.rfft2(forcing(grid, amplitude, w0.dtype)))
    step = spectral.STEPPERS[scheme](equation, frame_dt / steps_per_frame)
    return spectral.rollout(
        step,
        spectral.rfft2(w0),
        steps_per_frame=steps_per_frame,
        num_frames=num_frames,
        observe=lambda w_hat: spectral.irfft2(w_hat, grid.n),
    )


def _terms(frames, grid: Grid, nu, final_time: float, forcing_amplitude):
    frames = jnp.asarray(frames)
    final_time, num_frames = spectral.check_times(final_time, frames.shape[0])
    dt = final_time / (num_frames - 1)
    mid = 0.5 * (frames[1:] + frames[:-1])
    time_term = (frames[1:] - frames[:-1]) / dt
    ky, kx = spectral.wavenumbers(grid, frames.dtype)
    mid_hat = spectral.rfft2(mid)
    psi_hat = _psi_hat(mid_hat, kx, ky)
    vx = spectral.irfft2(1j * ky * psi_hat, grid.n)
    vy = spectral.irfft2(-1j * kx * psi_hat, grid.n)
    wx = spectral.irfft2(1j * kx * mid_hat, grid.n)
    wy = spectral.irfft2(1j * ky * mid_hat, grid.n)
    mask = spectral.dealias(grid)
    advection = spectral.irfft2(jnp.where(mask, spectral.rfft2(vx * wx + vy * wy), 0), grid.n)
    diffusion = nu * spectral.irfft2(-(kx**2 + ky**2) * mid_hat, grid.n)
    return time_term, advection, diffusion, forcing(grid, forcing_amplitude, frames.dtype)


def residual(frames, grid: Grid, *, nu, final_time: float = 0.4, forcing_amplitude=0.1) -> jax.Array:
    """Time-centred residual between frames, `(num_frames - 1, n, n)`.

    (w_{h+1} - w_h) / dt + P[v_mid . grad w_mid] - nu lap w_mid - f with
    w_mid = (w_h + w_{h+1}) / 2, dt = T / (num_frames - 1), spectral
    derivatives and P the 2/3 mask: O(dt^2) for an exact trajectory (the
    PDE-OBS quality-report residual).
    """
    time_term, advection, diffusion, force = _terms(frames, grid, nu, final_time, forcing_amplitude)
    return time_term + advection - diffusion - force


def normalized_residual(
    frames, grid: Grid, *, nu, final_time: float = 0.4, forcing_amplitude=0.1
) -> jax.Array:
    """rms(residual) / (rms(w_t) + rms(advection) + rms(nu lap w) + rms(f))."""
    terms = _terms(frames, grid, nu, final_time, forcing_amplitude)
    return spectral.normalized_residual(terms[0] + terms[1] - terms[2] - terms[3], *terms)
