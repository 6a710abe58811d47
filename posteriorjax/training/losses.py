"""Training losses `loss_fn(model, key, batch) -> scalar` of the network kinds, and the eval error."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import diffusion


class DiffusionLoss(eqx.Module):
    """EDM denoising score matching (`diffusion.dsm_loss`) on batches of normalized fields."""

    noise: Any
    p_mean: float = eqx.field(static=True, default=-1.2)
    p_std: float = eqx.field(static=True, default=1.2)

    def __call__(self, model, key, batch):
        return diffusion.dsm_loss(model, key, batch, noise=self.noise, p_mean=self.p_mean, p_std=self.p_std)


def surrogate_loss(model, key, batch):
    """Mean squared error in normalized state units."""
    x_n, u_n = batch
    pred = jax.vmap(lambda x, k: model.normalized(x, key=k))(x_n, jr.split(key, x_n.shape[0]))
    return jnp.mean((pred - u_n) ** 2)


class InverseLoss(eqx.Module):
    """Mean squared error of the inverse network in normalized unknown units, dropout on."""

    mask: jax.Array

    def __call__(self, model, key, batch):
        y_grid, x = batch
        keys = jr.split(key, x.shape[0])
        pred = jax.vmap(lambda y, k: model.normalized(y, self.mask, key=k))(y_grid, keys)
        return jnp.mean((pred - model.x_norm.normalize(x)) ** 2)
