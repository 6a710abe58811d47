"""EDM-preconditioned denoiser over one field or a joint (unknown, solution) stack.

D(x, sigma) = c_skip(sigma) x + c_out(sigma) F(c_in(sigma) x, c_noise(sigma))   (Karras et al. 2022, Eq. 7)
  c_skip = sigma_d^2 / (sigma^2 + sigma_d^2),   c_out = sigma sigma_d / sqrt(sigma^2 + sigma_d^2),
  c_in = 1 / sqrt(sigma^2 + sigma_d^2),         c_noise = ln(sigma) / 4.
With data of pointwise std sigma_d and unit-variance noise, the network input c_in x and its
regression target (x0 - c_skip x) / c_out both have unit variance at every sigma.

The denoiser works in *normalized units*: each channel c of a physical field z is mapped to
(z_c - mean_c) / std_c (`Normalizer`), so sigma_d = 1 for a well-normalized prior. The means
and stds are static floats (part of the model's structure, checkpointed with it).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax.nn.normalized import Normalizer


def preconditioning(sigma, sigma_data: float = 1.0):
    """(c_skip, c_out, c_in, c_noise) at noise level `sigma` (scalar or array)."""
    sigma = jnp.asarray(sigma)
    s2 = sigma**2 + sigma_data**2
    return sigma_data**2 / s2, sigma * sigma_data / jnp.sqrt(s2), 1.0 / jnp.sqrt(s2), jnp.log(sigma) / 4.0


def regression_target(x0, x_noisy, sigma, sigma_data: float = 1.0):
    """The network target (x0 - c_skip x) / c_out that makes ||D - x0||^2 = c_out^2 ||F - target||^2.

    `x0`, `x_noisy` are fields of one shape, `(C, H, W)` or batched `(B, C, H, W)`, with `sigma`
    broadcasting against them (EDM Eq. 8).
    """
    c_skip, c_out, _, _ = preconditioning(sigma, sigma_data)
    return (x0 - c_skip * x_noisy) / c_out


class EDMDenoiser(eqx.Module):
    """D(x, sigma) on normalized fields `(C, H, W)`; `net(x, c_noise, *, key=None) -> (C, H, W)`.

    Attributes:
      net: a noise-conditioned backbone (`nn.FNO`/`nn.UNO`/`nn.UNet` with `embed_dim > 0`).
      normalizer: per-channel physical <-> normalized map.
      sigma_data: std of the normalized data (1 for a field normalized by its prior std).
    """

    net: eqx.Module
    normalizer: Normalizer
    sigma_data: float = eqx.field(static=True, default=1.0)

    @property
    def channels(self) -> int:
        return self.normalizer.channels

    def __call__(self, x: jax.Array, sigma, *, key=None) -> jax.Array:
        if x.ndim != 3 or x.shape[0] != self.channels:
            raise ValueError(f"x: expected a normalized field ({self.channels}, H, W), got shape {x.shape}")
        c_skip, c_out, c_in, c_noise = preconditioning(sigma, self.sigma_data)
        # the coefficients take sigma's dtype; the network and the result keep the field's
        f = self.net((c_in * x).astype(x.dtype), c_noise, key=key)
        return (c_skip * x + c_out * f).astype(x.dtype)

    def normalize(self, z: jax.Array) -> jax.Array:
        return self.normalizer.normalize(z)

    def denormalize(self, x: jax.Array) -> jax.Array:
        return self.normalizer.denormalize(x)


def score(denoiser, x: jax.Array, sigma, noise) -> jax.Array:
    """grad_x log p_sigma(x) = C_n^-1 (D(x, sigma) - x) / sigma^2 (Tweedie), C_n the noise covariance.

    `x (C, H, W)` in the denoiser's normalized units at scalar level `sigma`; returns `(C, H, W)`.
    `noise` is the generator of the diffusion noise (`WhiteNoise`: C_n = I, EDM Eq. 3).
    """
    return noise.precision_apply(denoiser(x, sigma) - x) / jnp.asarray(sigma) ** 2
