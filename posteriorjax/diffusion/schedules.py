"""Noise-level distributions and sampling schedules (Karras et al. 2022, "EDM").

Training draws ln(sigma) ~ N(P_mean, P_std^2) (EDM Table 1: P_mean = -1.2, P_std = 1.2).
Sampling uses the rho-schedule sigma_i = (s_max^(1/rho) + i/(N-1) (s_min^(1/rho) - s_max^(1/rho)))^rho,
i = 0..N-1, followed by sigma_N = 0 (EDM Eq. 5, rho = 7).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks


def log_normal_sigma(key, shape=(), *, p_mean: float = -1.2, p_std: float = 1.2) -> jax.Array:
    """sigma = exp(p_mean + p_std * n), n ~ N(0, 1), of shape `shape` (e.g. `(B,)`; EDM Table 1)."""
    return jnp.exp(p_mean + p_std * jr.normal(key, shape))


def karras_sigmas(num_steps: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> jax.Array:
    """Decreasing noise levels `(num_steps + 1,)`: the rho-schedule from sigma_max to sigma_min, then 0."""
    num_steps = checks.positive_int("num_steps", num_steps)
    if not 0 < sigma_min < sigma_max:
        raise ValueError(
            f"sigma_min, sigma_max: expected 0 < sigma_min < sigma_max, got {sigma_min}, {sigma_max}"
        )
    if num_steps == 1:
        return jnp.array([sigma_max, 0.0])
    i = jnp.arange(num_steps) / (num_steps - 1)
    inv = 1.0 / rho
    s = (sigma_max**inv + i * (sigma_min**inv - sigma_max**inv)) ** rho
    return jnp.concatenate([s, jnp.zeros(1)])
