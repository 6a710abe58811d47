"""Heat equation on the periodic square, propagated exactly in Fourier space.

Equation (unit: lengths in units of the domain side L = grid.length, time in
the units of 1 / alpha per length^2):

    u_t = alpha lap u,   x in [0, L)^2 periodic.

Scheme: the Fourier modes decouple, u_hat_k(t) = exp(-alpha |k|^2 t) u_hat_k(0)
with angular |k|^2 = kx^2 + ky^2. Every frame is computed directly from u0, so
there is no time-step error at all (the only error is round-off); the spatial
discretization is spectral (exact for the trigonometric interpolant of u0).
No time stepping means no scan: each frame costs one inverse FFT.

Shapes: u0 `(n, n)` indexed `[y, x]` -> frames `(num_frames, n, n)` at
t_h = h T / (num_frames - 1). `alpha` is an array (vmap it for a sweep);
`final_time` and `num_frames` are static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posteriorjax import checks
from posteriorjax.grids import Grid
from posteriorjax.physics import spectral

ORDER = None  # exact in time


def propagator(grid: Grid, alpha, t, dtype) -> jax.Array:
    """exp(alpha L t) `(..., n, n // 2 + 1)` for times `t` of shape `(...)`."""
    lap = spectral.laplacian_symbol(grid, dtype)
    t = jnp.asarray(t, dtype=dtype)
    return jnp.exp(alpha * lap * t[..., None, None])


def solve(u0, grid: Grid, *, alpha, final_time: float = 0.25, num_frames: int = 15) -> jax.Array:
    """Frames `(num_frames, n, n)` of u_t = alpha lap u at t_h = h T / (num_frames - 1).

    Args:
      u0: initial state `(n, n)`, finite.
      grid: periodic `Grid`.
      alpha: diffusivity (scalar array, > 0).
      final_time: T > 0 (static).
      num_frames: number of frames >= 2 (static); frame 0 is u0 itself.
    """
    spectral.check_grid(grid, dealias=False)
    final_time, num_frames = spectral.check_times(final_time, num_frames)
    u0 = spectral.check_state(u0, grid)
    alpha = checks.positive_scalar("alpha", alpha, u0.dtype)
    u0_hat = spectral.rfft2(u0)
    # one inverse FFT per frame: XLA's CPU FFT is several times slower on one
    # call with a long batch axis than on the same work split into calls
    frames = [
        spectral.irfft2(propagator(grid, alpha, t, u0.dtype) * u0_hat, grid.n)
        for t in spectral.frame_times(final_time, num_frames)
    ]
    return jnp.stack(frames).astype(u0.dtype)


def residual(frames, grid: Grid, *, alpha, final_time: float = 0.25) -> jax.Array:
    """Replay residual u_{h+1} - exp(alpha lap dt) u_h, `(num_frames - 1, n, n)`.

    dt = T / (num_frames - 1). For frames from `solve` this is round-off; it is
    the heat check of the PDE-OBS quality report (`fourier_exact_diffusion`).
    """
    frames = jnp.asarray(frames)
    num_frames = frames.shape[0]
    final_time, num_frames = spectral.check_times(final_time, num_frames)
    dt = final_time / (num_frames - 1)
    step = propagator(grid, alpha, dt, frames.dtype)
    expected = spectral.irfft2(step * spectral.rfft2(frames[:-1]), grid.n)
    return frames[1:] - expected


def normalized_residual(frames, grid: Grid, *, alpha, final_time: float = 0.25) -> jax.Array:
    """rms(residual) / (rms(u_{h+1}) + rms(exp(alpha lap dt) u_h)) over all frame pairs."""
    res = residual(frames, grid, alpha=alpha, final_time=final_time)
    expected = frames[1:] - res
    return spectral.normalized_residual(res, frames[1:], expected)
