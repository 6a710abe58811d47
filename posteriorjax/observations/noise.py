"""Observation noise models."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks, rng


class GaussianNoise(eqx.Module):
    """Independent Gaussian observation noise, y = A(u) + std * xi, xi ~ N(0, I).

    Attributes:
      std: scalar or per-observation `(M,)` standard deviation, finite and > 0.
    """

    std: jax.Array

    def __init__(self, std):
        std = jnp.asarray(std, dtype=jnp.result_type(float))
        if std.ndim > 1:
            raise ValueError(f"std: expected a scalar or a 1-D per-observation array, got shape {std.shape}")
        try:
            value = np.asarray(std)
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            value = None
        if value is None:
            std = checks.error_if(
                std, ~jnp.all(jnp.isfinite(std) & (std > 0)), "std: expected finite values > 0"
            )
        elif value.size == 0 or not np.all(np.isfinite(value) & (value > 0)):
            raise ValueError(f"std: expected finite values > 0, got {value}")
        self.std = std

    def _check(self, shape, name: str) -> None:
        try:
            ok = jnp.broadcast_shapes(jnp.shape(self.std), tuple(shape)) == tuple(shape)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"{name}: shape {tuple(shape)} does not match std of shape {jnp.shape(self.std)}"
            )

    def sample(self, key, shape) -> jax.Array:
        """Noise draw of `shape` (std broadcast along the trailing axis)."""
        shape = tuple(shape)
        self._check(shape, "shape")
        return self.std * rng.normal(key, shape, dtype=self.std.dtype)

    def whiten(self, residual) -> jax.Array:
        """`residual / std`, elementwise."""
        self._check(jnp.shape(residual), "residual")
        return residual / self.std

    def log_likelihood(self, residual) -> jax.Array:
        """Gaussian log-density of `residual` (all elements), with normalization.

        log p = -1/2 sum (r / std)^2 - sum log std - (M / 2) log(2 pi).
        """
        self._check(jnp.shape(residual), "residual")
        z = residual / self.std
        log_std = jnp.broadcast_to(jnp.log(self.std), jnp.shape(residual))
        return -0.5 * jnp.sum(z**2) - jnp.sum(log_std) - 0.5 * z.size * jnp.log(2.0 * jnp.pi)

    def variance(self, size: int) -> jax.Array:
        """Diagonal of the noise covariance, `(size,)`."""
        self._check((size,), "size")
        return jnp.broadcast_to(self.std**2, (size,))
