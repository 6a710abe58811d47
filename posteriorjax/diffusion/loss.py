"""Denoising score-matching loss with EDM weighting.

L = E_{x0, sigma, eps} [ lambda(sigma) || D(x0 + sigma eps, sigma) - x0 ||^2 ] / (C H W),
lambda = (sigma^2 + sigma_d^2) / (sigma sigma_d)^2 = 1 / c_out^2, ln sigma ~ N(P_mean, P_std^2),
eps from the chosen noise generator (white or function-space GRF). With the weighting the
per-sigma loss is the network's unit-scale regression error (Karras et al. 2022, Eq. 8).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.diffusion.schedules import log_normal_sigma


def dsm_loss(denoiser, key, x0: jax.Array, *, noise, p_mean: float = -1.2, p_std: float = 1.2, dropout=True):
    """Mean weighted DSM loss over a batch `x0 (B, C, H, W)` of normalized fields; returns a scalar."""
    if x0.ndim != 4:
        raise ValueError(f"x0: expected a batch (B, C, H, W), got shape {x0.shape}")
    keys = jr.split(key, x0.shape[0])

    def one(k, x):
        k_sigma, k_eps, k_net = jr.split(k, 3)
        sigma = log_normal_sigma(k_sigma, p_mean=p_mean, p_std=p_std)
        eps = noise.sample(k_eps, x.shape).astype(x.dtype)
        d = denoiser(x + sigma * eps, sigma, key=k_net if dropout else None)
        weight = (sigma**2 + denoiser.sigma_data**2) / (sigma * denoiser.sigma_data) ** 2
        return weight * jnp.mean((d - x) ** 2)

    return jnp.mean(jax.vmap(one)(keys, x0))
