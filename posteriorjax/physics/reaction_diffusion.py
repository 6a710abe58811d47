"""Reaction-diffusion on the periodic square: Allen-Cahn and Fisher-KPP, Strang split.

Equation (x in [0, L)^2 periodic, time and length in the domain's units):

    u_t = D lap u + R(u),
    R(u) = r (u - u^3)   ("allen_cahn", default; D = 0.008 in the PDE-OBS family)
    R(u) = r u (1 - u)   ("fisher_kpp"; fronts travel at 2 sqrt(D r)).

Scheme: Strang splitting with both sub-flows exact (order 2 in time,
unconditionally stable, no time-step restriction besides accuracy):

    u+ = Phi_R(dt/2) o exp(D lap dt) o Phi_R(dt/2) u,

where the diffusion flow is exact in Fourier space and the pointwise reaction
flow is the closed-form ODE solution

    Allen-Cahn:  Phi_R(t) u = u / sqrt(u^2 + (1 - u^2) e^{-2 r t}),
    Fisher-KPP:  Phi_R(t) u = u e^{r t} / (1 + u (e^{r t} - 1)).

The reaction acts on grid values (collocation), so no dealiasing is applied.
(The Fisher-KPP flow blows up in finite time for u < 0, as the ODE does; use it
with states in [0, 1].) Fixed steps under `lax.scan`: the splitting is exact
per sub-flow and has no adaptive error estimate, and a static step count keeps
`vmap` batches in lockstep (see `posteriorjax.physics.spectral`).

Shapes: u0 `(n, n)` `[y, x]` -> frames `(num_frames, n, n)` at t_h = h T / (num_frames - 1).
`r` and `D` are arrays (vmap them); times, step counts and `reaction` are static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posteriorjax import checks
from posteriorjax.grids import Grid, fft_wavenumbers
from posteriorjax.physics import spectral

ORDER = 2
REACTIONS = ("allen_cahn", "fisher_kpp")
DEFAULT_MAX_DT = 2.5e-3


def reaction_term(u, r, reaction: str):
    """R(u) pointwise."""
    if reaction == "allen_cahn":
        return r * (u - u**3)
    return r * u * (1.0 - u)


def reaction_flow(u, r, t, reaction: str):
    """Exact solution at time t of the pointwise ODE u' = R(u)."""
    if reaction == "allen_cahn":
        decay = jnp.exp(-2.0 * r * t)
        return u * jax.lax.rsqrt(u * u + (1.0 - u * u) * decay)
    growth = jnp.exp(r * t)
    return u * growth / (1.0 + u * (growth - 1.0))


def _check_reaction(reaction: str) -> None:
    checks.in_choices("reaction", reaction, REACTIONS)


def strang(grid: Grid, *, r, diffusivity, reaction: str, dt):
    """One Strang step u -> Phi_R(dt/2) exp(D lap dt) Phi_R(dt/2) u on physical states."""
    decay = jnp.exp(diffusivity * spectral.laplacian_symbol(grid, jnp.result_type(r)) * dt)

    def step(u):
        u = reaction_flow(u, r, 0.5 * dt, reaction)
        u = spectral.irfft2(decay * spectral.rfft2(u), grid.n)
        return reaction_flow(u, r, 0.5 * dt, reaction)

    return step


def solve(
    u0,
    grid: Grid,
    *,
    r,
    diffusivity=0.008,
    final_time: float = 0.8,
    num_frames: int = 15,
    reaction: str = "allen_cahn",
    steps_per_frame: int | None = None,
    max_dt: float = DEFAULT_MAX_DT,
) -> jax.Array:
    """Frames `(num_frames, n, n)` of u_t = D lap u + R(u).

    Args:
      u0: initial state `(n, n)`, finite.
      grid: periodic `Grid`.
      r: reaction rate (scalar array, > 0).
      diffusivity: D (scalar array, > 0); 0.008 in the PDE-OBS family.
      final_time: T > 0 (static).
      num_frames: frames >= 2 at t_h = h T / (num_frames - 1) (static).
      reaction: ``"allen_cahn"`` or ``"fisher_kpp"``.
      steps_per_frame: Strang steps per frame interval (static); by default the
        fewest with dt <= `max_dt` (2.5e-3: ~1e-6 relative error at r = 4).
    """
    spectral.check_grid(grid, dealias=False)
    _check_reaction(reaction)
    final_time, num_frames = spectral.check_times(final_time, num_frames)
    frame_dt = final_time / (num_frames - 1)
    if steps_per_frame is None:
        steps_per_frame = spectral.steps_for(frame_dt, max_dt)
    steps_per_frame = checks.positive_int("steps_per_frame", steps_per_frame)
    u0 = spectral.check_state(u0, grid)
    r = checks.positive_scalar("r", r, u0.dtype)
    diffusivity = checks.positive_scalar("diffusivity", diffusivity, u0.dtype)
    dt = frame_dt / steps_per_frame
    step = strang(grid, r=r, diffusivity=diffusivity, reaction=reaction, dt=dt)
    return spectral.rollout(
        step, u0, steps_per_frame=steps_per_frame, num_frames=num_frames, observe=lambda u: u
    )


def _terms(frames, grid: Grid, r, diffusivity, final_time: float, reaction: str):
    frames = jnp.asarray(frames)
    final_time, num_frames = spectral.check_times(final_time, frames.shape[0])
    dt = final_time / (num_frames - 1)
    mid = 0.5 * (frames[1:] + frames[:-1])
    time_term = (frames[1:] - frames[:-1]) / dt
    lap = spectral.laplacian_symbol(grid, frames.dtype)
    diffusion = diffusivity * spectral.irfft2(lap * spectral.rfft2(mid), grid.n)
    return time_term, diffusion, reaction_term(mid, r, reaction)


def residual(
    frames, grid: Grid, *, r, diffusivity=0.008, final_time: float = 0.8, reaction: str = "allen_cahn"
) -> jax.Array:
    """Time-centred residual between frames, `(num_frames - 1, n, n)`.

    (u_{h+1} - u_h) / dt - D lap u_mid - R(u_mid), u_mid = (u_h + u_{h+1}) / 2,
    dt = T / (num_frames - 1), spectral Laplacian: O(dt^2) for an exact
    trajectory (the PDE-OBS quality-report residual).
    """
    _check_reaction(reaction)
    time_term, diffusion, react = _terms(frames, grid, r, diffusivity, final_time, reaction)
    return time_term - diffusion - react


def normalized_residual(
    frames, grid: Grid, *, r, diffusivity=0.008, final_time: float = 0.8, reaction: str = "allen_cahn"
) -> jax.Array:
    """rms(residual) / (rms(u_t) + rms(D lap u) + rms(R(u)))."""
    _check_reaction(reaction)
    terms = _terms(frames, grid, r, diffusivity, final_time, reaction)
    return spectral.normalized_residual(terms[0] - terms[1] - terms[2], *terms)


def energy(u, grid: Grid, *, r, diffusivity=0.008) -> jax.Array:
    """Allen-Cahn free energy E(u) = int D/2 |grad u|^2 + r/4 (1 - u^2)^2 dx (non-increasing).

    The gradient term is evaluated spectrally (Parseval); `u` is `(..., n, n)`.
    """
    u = jnp.asarray(u)
    ky, kx = fft_wavenumbers(grid.n, grid.length, real=False)
    k_sq = jnp.asarray(kx**2 + ky**2, dtype=u.dtype)
    u_hat = jnp.fft.fft2(u, axes=(-2, -1))
    grad_sq = jnp.sum(k_sq * jnp.abs(u_hat) ** 2, axis=(-2, -1)) / grid.n**2
    cell = (grid.length / grid.n) ** 2
    potential = jnp.sum(0.25 * r * (1.0 - u**2) ** 2, axis=(-2, -1)) * cell
    return 0.5 * diffusivity * grad_sq * cell + potential
