"""Unconditional sampling: deterministic Euler/Heun steps (EDM Alg. 1) and the probability-flow ODE.

The probability-flow ODE in the EDM parametrization (sigma(t) = t, s(t) = 1) is
    dx / dsigma = (x - D(x, sigma)) / sigma,
integrated from sigma_max (x ~ sigma_max eps, eps from the noise generator) down to 0.
`euler_step`/`heun_step` take one step between two levels of a schedule (Heun's
second-order correction is skipped when the next level is 0, as in EDM). `sample`
scans them over a schedule; `sample_ode` hands the same ODE to a diffrax solver.
Denoisers are plain callables `denoise_fn(x, sigma) -> x0_hat`, so guidance can wrap one.
All functions draw one sample `(C, H, W)`; vmap over keys for an ensemble.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp

from posteriorjax import checks


def _drift(denoise_fn, x, sigma):
    return (x - denoise_fn(x, sigma)) / sigma


def euler_step(denoise_fn, x: jax.Array, sigma, sigma_next) -> jax.Array:
    """One Euler step of dx/dsigma = (x - D(x, sigma)) / sigma from `sigma` to `sigma_next` (EDM Alg. 1).

    x_next = x + (sigma_next - sigma) (x - D(x, sigma)) / sigma, for one field `x (C, H, W)`;
    `sigma`, `sigma_next` are scalars in the units of the (normalized) field.
    """
    return x + (sigma_next - sigma) * _drift(denoise_fn, x, sigma)


def heun_step(denoise_fn, x: jax.Array, sigma, sigma_next) -> jax.Array:
    """One Heun (trapezoidal) step of the probability-flow ODE (EDM Alg. 1, lines 4-8).

    `x (C, H, W)` at scalar level `sigma` to `sigma_next`; the second-order correction needs
    D(x_euler, sigma_next), undefined at sigma_next = 0, so the last step is Euler, as in EDM.
    """
    d = _drift(denoise_fn, x, sigma)
    x_euler = x + (sigma_next - sigma) * d
    # the Heun branch is computed on the last step too (jnp.where evaluates both): a stand-in
    # level keeps D(x, 0) and its 1/sigma from putting inf or NaN into values and gradients
    safe_next = jnp.where(sigma_next > 0, sigma_next, 1.0)
    d_next = _drift(denoise_fn, x_euler, safe_next)
    x_heun = x + (sigma_next - sigma) * 0.5 * (d + d_next)
    return jnp.where(sigma_next > 0, x_heun, x_euler)


STEPS = {"euler": euler_step, "heun": heun_step}


def sample(key, denoise_fn, shape, sigmas: jax.Array, *, noise, method: str = "heun") -> jax.Array:
    """One sample `shape = (C, H, W)` by `method` steps over the decreasing levels `sigmas (N + 1,)`.

    With Heun, the cost is 2N - 1 denoiser evaluations (EDM: N = 18 gives 35).
    """
    checks.in_choices("method", method, sorted(STEPS))
    sigmas = jnp.asarray(sigmas)
    if sigmas.ndim != 1 or sigmas.shape[0] < 2:
        raise ValueError(f"sigmas: expected a 1-D schedule of at least 2 levels, got shape {sigmas.shape}")
    step = STEPS[method]
    x = sigmas[0] * noise.sample(key, shape)

    def body(x, pair):
        return step(denoise_fn, x, pair[0], pair[1]), None

    x, _ = jax.lax.scan(body, x, jnp.stack([sigmas[:-1], sigmas[1:]], axis=1))
    return x


def sample_ode(
    key,
    denoise_fn,
    shape,
    *,
    noise,
    sigma_max: float = 80.0,
    sigma_min: float = 2e-3,
    solver=None,
    rtol: float = 1e-3,
    atol: float = 1e-3,
    max_steps: int = 4096,
) -> jax.Array:
    """One sample `shape = (C, H, W)` by integrating the probability-flow ODE with diffrax.

    dx/dsigma = (x - D(x, sigma)) / sigma (EDM Eq. 1 with sigma(t) = t, s(t) = 1) from
    sigma_max down to sigma_min. Adaptive step size (PID controller, `rtol`/`atol`) with
    `solver` (default `diffrax.Tsit5()`); the result is the denoised estimate
    D(x(sigma_min), sigma_min).
    """
    if not 0 < sigma_min < sigma_max:
        raise ValueError(
            f"sigma_min, sigma_max: expected 0 < sigma_min < sigma_max, got {sigma_min}, {sigma_max}"
        )
    x0 = sigma_max * noise.sample(key, shape)
    term = diffrax.ODETerm(lambda s, x, args: _drift(denoise_fn, x, s))
    sol = diffrax.diffeqsolve(
        term,
        diffrax.Tsit5() if solver is None else solver,
        t0=sigma_max,
        t1=sigma_min,
        dt0=-(sigma_max - sigma_min) / 64,  # sigma decreases: a negative first step, then adaptive
        y0=x0,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
    )
    x = sol.ys[-1]
    # the ODE stops at sigma_min > 0 (the drift's 1/sigma): one denoising removes what noise is left
    return denoise_fn(x, jnp.asarray(sigma_min, x.dtype))
