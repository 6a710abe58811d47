"""Periodic pseudo-spectral building blocks shared by the time-dependent solvers.

The solvers are written in orthogonal parts (jax-cfd `spectral/equations.py`
style):

* an *equation* object (an `eqx.Module` holding the physical parameters as
  arrays and the `Grid` as static metadata) exposes the stiff diagonal linear
  symbol ``linear()`` (so that ``d/dt u_hat = L u_hat + N(u_hat)``) and the
  explicit terms ``nonlinear(u_hat)``, both in rFFT space;
* a *stepper factory* (`ifrk4`, `crank_nicolson_euler`) turns an equation and
  a time step into a pure ``step(u_hat) -> u_hat``;
* `rollout` scans the step to produce equally spaced frames, with each frame
  segment wrapped in `jax.checkpoint` so reverse-mode memory is
  O(num_frames) states, not O(total steps).

Fixed-step `lax.scan` rather than an adaptive `diffrax.diffeqsolve` is used on
purpose: the step count is static, so a `vmap` over initial conditions or
parameters runs in lockstep with no masked while-loop iterations; forward mode
(`jax.jacfwd`) and reverse mode both differentiate a plain scan; and the
integrating factor is restarted every step, so exp(L dt) never overflows
(a global integrating factor exp(nu |k|^2 t) exceeds float64 range at 128^2).

Conventions: fields are `(n, n)` indexed `[y, x]` on the periodic points
x_i = i h, h = L / n (see `posteriorjax.grids`); spectra are `rfft2` arrays
`(n, n // 2 + 1)`; wavenumbers are angular (rad per unit length).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.grids import Grid, dealias_mask, fft_wavenumbers

MIN_DEALIAS_N = 8

# ----------------------------------------------------------------------------
# Validation at the public boundary


def check_grid(grid: Grid, *, dealias: bool, name: str = "grid") -> None:
    """Raise ValueError unless `grid` is periodic (and usable by the 2/3 rule).

    The 2/3 rule keeps |m_x|, |m_y| <= n / 3; it needs an even `n` (so the
    Nyquist mode exists and is removed) and `n >= 8` (so at least the modes
    |m| <= 2 survive and a quadratic product of them is resolved).
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"{name}: expected a posteriorjax.grids.Grid, got {type(grid).__name__}")
    if grid.bc != "periodic":
        raise ValueError(f"{name}: periodic spectral solvers need bc='periodic', got bc={grid.bc!r}")
    if dealias and (grid.n % 2 or grid.n < MIN_DEALIAS_N):
        raise ValueError(f"{name}: 2/3-rule dealiasing needs an even n >= {MIN_DEALIAS_N}, got n={grid.n}")


def check_state(u, grid: Grid, name: str = "u0"):
    """Check shape `(n, n)`, a floating dtype and finiteness; returns `u` (as an array).

    Concrete arrays raise ValueError; traced ones go through `checks.error_if`.
    """
    grid.check_field(u, name)
    u = jnp.asarray(u)
    if not jnp.issubdtype(u.dtype, jnp.floating):
        raise ValueError(f"{name}: expected a real floating-point field, got dtype {u.dtype}")
    message = f"{name}: initial state must be finite (found NaN or inf)"
    if checks.is_traced(u):
        return checks.error_if(u, ~jnp.all(jnp.isfinite(u)), message)
    if not np.all(np.isfinite(np.asarray(u))):
        raise ValueError(message)
    return u


def check_bound(u, value, bound: float, name: str, what: str):
    """Return `u`, raising (or `checks.error_if` when traced) if `value > bound`.

    Used for the CFL speed bound: the static time step was chosen for `bound`.
    """
    message = f"{name}: {what} exceeds max_speed={bound} used for the CFL time step; pass a larger max_speed"
    if checks.is_traced(u) or checks.is_traced(value):
        return checks.error_if(u, value > bound, message)
    value = float(np.asarray(value))
    if value > bound:
        raise ValueError(f"{message} ({what} = {value:.4g})")
    return u


def check_times(final_time, num_frames) -> tuple[float, int]:
    """Validate the static time axis: final_time > 0 finite, integer num_frames >= 2."""
    final_time = checks.positive("final_time", final_time)  # static: it sets the step count
    if isinstance(num_frames, bool) or not isinstance(num_frames, int | np.integer) or num_frames < 2:
        raise ValueError(
            f"num_frames: must be an integer >= 2 (frame 0 is the initial state), got {num_frames!r}"
        )
    return final_time, int(num_frames)


def steps_for(frame_dt: float, dt_max: float) -> int:
    """Smallest number of equal steps per frame with step <= dt_max."""
    # the factor keeps a ratio that round-off lifts just above an integer (0.07 / 0.01) from
    # costing one more step
    return max(1, math.ceil(frame_dt / dt_max * (1.0 - 1e-12)))


# ----------------------------------------------------------------------------
# Spectral operators


def wavenumbers(grid: Grid, dtype) -> tuple[jax.Array, jax.Array]:
    """Angular wavenumbers `(ky, kx)` of `rfft2`, each `(n, n // 2 + 1)`, in `dtype`."""
    ky, kx = fft_wavenumbers(grid.n, grid.length, real=True)
    return jnp.asarray(ky, dtype=dtype), jnp.asarray(kx, dtype=dtype)


def laplacian_symbol(grid: Grid, dtype) -> jax.Array:
    """Fourier symbol of the Laplacian, -(kx^2 + ky^2), `(n, n // 2 + 1)`."""
    ky, kx = wavenumbers(grid, dtype)
    return -(kx**2 + ky**2)


def dealias(grid: Grid) -> jax.Array:
    """2/3-rule mask `(n, n // 2 + 1)` (bool)."""
    return jnp.asarray(dealias_mask(grid.n, real=True))


def rfft2(u: jax.Array) -> jax.Array:
    return jnp.fft.rfft2(u, axes=(-2, -1))


def irfft2(u_hat: jax.Array, n: int) -> jax.Array:
    return jnp.fft.irfft2(u_hat, s=(n, n), axes=(-2, -1))


def mean(u: jax.Array) -> jax.Array:
    """Spatial mean over the last two axes."""
    return jnp.mean(u, axis=(-2, -1))


def rms(u: jax.Array) -> jax.Array:
    """Root mean square over all elements."""
    return jnp.sqrt(jnp.mean(jnp.square(u)))


def normalized_residual(residual: jax.Array, *terms: jax.Array) -> jax.Array:
    """rms(residual) / sum_i rms(term_i): the normalization of the PDE-OBS quality report."""
    scale = sum(rms(t) for t in terms)
    tiny = jnp.finfo(residual.dtype).tiny
    return rms(residual) / jnp.maximum(scale, tiny)


# ----------------------------------------------------------------------------
# Steppers: d/dt u_hat = L u_hat + N(u_hat), L diagonal


class AbstractSemilinearEquation(eqx.Module):
    """An evolution equation d/dt u_hat = L u_hat + N(u_hat) in rFFT space."""

    @abc.abstractmethod
    def linear(self) -> jax.Array:
        """Diagonal linear symbol L `(n, n // 2 + 1)` (real, <= 0)."""

    @abc.abstractmethod
    def nonlinear(self, u_hat: jax.Array) -> jax.Array:
        """Explicit terms N(u_hat) `(n, n // 2 + 1)` complex."""


def ifrk4(equation: AbstractSemilinearEquation, dt) -> Callable[[jax.Array], jax.Array]:
    """Integrating-factor classical RK4 step (order 4; L treated exactly).

    Classical RK4 applied to w' = e^{-L t} N(e^{L t} w) with w = e^{-L t} u_hat,
    restarted every step (Cox & Matthews 2002, eq. (14) family):

        k1 = dt N(u)                  k2 = dt N(E2 (u + k1/2))
        k3 = dt N(E2 u + k2/2)        k4 = dt N(E u + E2 k3)
        u+ = E u + (E k1 + 2 E2 (k2 + k3) + k4) / 6,   E = e^{L dt}, E2 = e^{L dt/2}.

    Linear stability: unconditional for L; for the advective part the RK4
    imaginary-axis bound |dt lambda| <= 2 sqrt(2).
    """
    lin = equation.linear()
    e_full = jnp.exp(lin * dt)
    e_half = jnp.exp(lin * (0.5 * dt))
    nonlinear = equation.nonlinear

    def step(u_hat):
        k1 = dt * nonlinear(u_hat)
        k2 = dt * nonlinear(e_half * (u_hat + 0.5 * k1))
        k3 = dt * nonlinear(e_half * u_hat + 0.5 * k2)
        k4 = dt * nonlinear(e_full * u_hat + e_half * k3)
        return e_full * u_hat + (e_full * k1 + 2.0 * e_half * (k2 + k3) + k4) / 6.0

    return step


def crank_nicolson_euler(equation: AbstractSemilinearEquation, dt) -> Callable[[jax.Array], jax.Array]:
    """Crank-Nicolson on L, forward Euler on N (order 1; the FNO generator's scheme).

    u+ = ((1 + dt L / 2) u + dt N(u)) / (1 - dt L / 2).
    """
    lin = equation.linear()
    numer = 1.0 + 0.5 * dt * lin
    denom = 1.0 - 0.5 * dt * lin
    nonlinear = equation.nonlinear

    def step(u_hat):
        return (numer * u_hat + dt * nonlinear(u_hat)) / denom

    return step


STEPPERS = {"ifrk4": ifrk4, "cn_euler": crank_nicolson_euler}
ORDERS = {"ifrk4": 4, "cn_euler": 1, "strang": 2}


def rollout(
    step: Callable[[jax.Array], jax.Array],
    state0: jax.Array,
    *,
    steps_per_frame: int,
    num_frames: int,
    observe: Callable[[jax.Array], jax.Array],
) -> jax.Array:
    """Frames `observe(state)` at steps 0, s, 2s, ..., (num_frames - 1) s, stacked on axis 0.

    The inner scan of `steps_per_frame` steps is wrapped in `jax.checkpoint`:
    reverse mode stores one state per frame and recomputes the steps within a
    segment, so memory does not grow with the total step count.
    """

    @jax.checkpoint
    def segment(state):
        state, _ = jax.lax.scan(lambda s, _: (step(s), None), state, None, length=steps_per_frame)
        return state

    def frame(state, _):
        state = segment(state)
        return state, observe(state)

    _, rest = jax.lax.scan(frame, state0, None, length=num_frames - 1)
    return jnp.concatenate([observe(state0)[None], rest], axis=0)


def frame_times(final_time: float, num_frames: int) -> np.ndarray:
    """t_h = h T / (num_frames - 1), h = 0..num_frames-1."""
    return np.linspace(0.0, final_time, num_frames)
