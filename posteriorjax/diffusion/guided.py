"""The one guided EDM integrator: Heun steps of the probability-flow ODE plus a guidance correction.

Step i from sigma_i to sigma_{i+1} (Karras et al. 2022, Alg. 1; Euler on the last step, where
sigma_{i+1} = 0):

    d_i = D(x_i, sigma_i),    s_i = (x_i - d_i) / sigma_i,    x_E = x_i + (sigma_{i+1} - sigma_i) s_i,
    d_c = D(x_E, sigma_{i+1}),  x_H = x_i + (sigma_{i+1} - sigma_i) (s_i + (x_E - d_c) / sigma_{i+1}) / 2,
    x_{i+1} = x_H - P grad_{x_i} L_i(points),
    points = {"denoised": d_i, "corrector": d_c (d_i on the last step)},

where L_i is the step's weighted guidance loss (it picks the point it is evaluated at) and P a
preconditioner (identity for DPS-type guidance; the noise covariance C_n for function-space
guidance, the probability-flow drift of the posterior under noise N(0, C_n) carrying
C_n grad log p(y | x)). The gradient flows through whichever denoiser calls the loss reads,
so a step costs two denoiser evaluations plus one backward pass.

The integrator is unit-agnostic: `denoise`, `sigmas` and the noise live in the trajectory's
units (the samplers convert, e.g. to the published 0.5-scaled units). One sample `(C, H, W)`;
vmap over keys for an ensemble.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

POINTS = ("denoised", "corrector")


def guided_sample(
    key, denoise, noise, shape, *, sigmas: jax.Array, loss_fn, precondition, noise_dtype=None
) -> jax.Array:
    """One guided sample, integrated in the dtype of `sigmas`.

    Args:
      key: PRNG key of the initial latent x_0 = sigmas[0] * eps, eps ~ `noise` drawn in
        `noise_dtype` (default JAX's float) and cast to the dtype of `sigmas`.
      denoise: `denoise(x, sigma) -> x0_hat`, same shape as x.
      noise: generator with `sample(key, shape)`.
      shape: `(C, H, W)` of the trajectory.
      sigmas: decreasing levels `(N + 1,)` ending at 0.
      loss_fn: `loss_fn(points, sigma_i, i) -> scalar`, the weighted guidance loss of step i;
        `points` maps each name of `POINTS` to its denoised state.
      precondition: `precondition(g) -> P g` on gradients of the trajectory's shape.
    """
    # drawn in `noise_dtype` and then cast, as the published float64 loops draw float32 noise
    x = sigmas[0] * noise.sample(key, shape, noise_dtype).astype(sigmas.dtype)

    def body(x, inputs):
        sigma, sigma_next, i = inputs

        def step(z):
            d = denoise(z, sigma)
            slope = (z - d) / sigma
            x_euler = z + (sigma_next - sigma) * slope
            last = sigma_next == 0
            # jnp.where evaluates both branches: on the last step (sigma_next = 0) the discarded
            # Heun branch runs at a stand-in level, so no 1/0 reaches the values or the gradient
            safe = jnp.where(last, 1.0, sigma_next)
            d_next = denoise(x_euler, safe)
            x_heun = z + (sigma_next - sigma) * 0.5 * (slope + (x_euler - d_next) / safe)
            points = {"denoised": d, "corrector": jnp.where(last, d, d_next)}
            return loss_fn(points, sigma, i), jnp.where(last, x_euler, x_heun)

        (_, x_next), grad = jax.value_and_grad(step, has_aux=True)(x)
        # the preconditioner may promote (a float32 covariance on a float64 state or the reverse):
        # lax.scan needs the carry's dtype unchanged
        return (x_next - precondition(grad)).astype(x.dtype), None

    n = sigmas.shape[0] - 1
    x, _ = jax.lax.scan(body, x, (sigmas[:-1], sigmas[1:], jnp.arange(n)))
    return x
