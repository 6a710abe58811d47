"""Noise generators for diffusion over fields: white noise and function-space (GRF) noise.

A generator draws `eps (C, H, W)` with unit pointwise variance and exposes the
covariance it draws from (`precision_apply`), which the score needs:
for x = x0 + sigma eps with eps ~ N(0, C_n), grad log p_sigma(x) = C_n^-1 (D(x, sigma) - x) / sigma^2.

`GRFNoise` is a Gaussian random field with the spectrum of `random_fields.GaussianRandomField`
(per-mode std ~ (lambda_k + tau^2)^(-alpha/2) in the cosine/sine/Fourier basis), rescaled to
unit pointwise variance on the grid it is drawn on. Its covariance is a trace-class operator
on functions, so a prior trained with it is defined on functions and the same generator
serves every resolution (the grid is read from the requested shape).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import random_fields


def _check_shape(shape) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3 or shape[1] != shape[2] or shape[1] < 2:
        raise ValueError(f"shape: expected a square field shape (C, n, n) with n >= 2, got {shape}")
    return shape


class WhiteNoise(eqx.Module):
    """i.i.d. N(0, 1) per grid value (C_n = I)."""

    def sample(self, key, shape) -> jax.Array:
        return jr.normal(key, tuple(shape))

    def precision_apply(self, v: jax.Array) -> jax.Array:
        return v


class GRFNoise(eqx.Module):
    """Function-space noise: each channel an independent GRF(alpha, tau) with unit pointwise variance.

    Attributes:
      alpha, tau: spectrum exponent and inverse length scale (see `random_fields`).
      basis: ``"fourier"`` (periodic, default: keeps the mean mode), ``"cosine"`` or ``"sine"``.
    """

    alpha: float = eqx.field(static=True, default=2.0)
    tau: float = eqx.field(static=True, default=3.0)
    basis: str = eqx.field(static=True, default="fourier")

    def __check_init__(self):
        if self.basis not in random_fields.BASES:
            raise ValueError(f"basis: expected one of {random_fields.BASES}, got {self.basis!r}")
        if not (self.alpha > 0 and self.tau > 0):
            raise ValueError(f"alpha, tau: expected positive numbers, got {self.alpha!r}, {self.tau!r}")

    def mode_std(self, n: int) -> jax.Array:
        """Per-mode std `(n, n)` in the basis layout, normalized to unit pointwise variance.

        Unlike the prior GRFs, the mean mode is kept (its std is the lambda = 0 value),
        so the noise covariance is invertible and every mode is diffused.
        """
        lam = random_fields.laplacian_eigenvalues(n, self.basis)
        s = (lam + self.tau**2) ** (-self.alpha / 2.0)
        s = s / np.sqrt(np.sum(s**2) / n**2)
        return jnp.asarray(s, jnp.result_type(float))

    def sample(self, key, shape) -> jax.Array:
        c, n, _ = _check_shape(shape)
        xi = jr.normal(key, (c, n, n))
        c_hat = random_fields.forward_transform(xi, self.basis) * self.mode_std(n)
        return random_fields.inverse_transform(c_hat, self.basis).astype(xi.dtype)

    def precision_apply(self, v: jax.Array) -> jax.Array:
        """C_n^-1 v for `v (..., n, n)`."""
        n = v.shape[-1]
        c_hat = random_fields.forward_transform(v, self.basis) / self.mode_std(n) ** 2
        return random_fields.inverse_transform(c_hat, self.basis).astype(v.dtype)


NOISES = {"white": WhiteNoise, "grf": GRFNoise}


def get(name: str, **options):
    """Noise generator by name: ``"white"`` or ``"grf"`` (options: alpha, tau, basis)."""
    if name not in NOISES:
        raise ValueError(f"noise: expected one of {sorted(NOISES)}, got {name!r}")
    return NOISES[name](**options)
