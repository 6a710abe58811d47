"""Noise-level / time embeddings for the diffusion backbones.

A network conditioned on the noise level receives the scalar c_noise (EDM: ln(sigma) / 4)
and maps it to a vector that every block adds to its features (FiLM bias).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn.layers import Pointwise


def sinusoidal_embedding(t: jax.Array, dim: int, max_positions: float = 10000.0) -> jax.Array:
    """Transformer embedding (DDPM++) `(dim,)`: [cos(t w_i), sin(t w_i)], w_i = max^(-2 i / dim)."""
    if dim % 2:
        raise ValueError(f"dim: expected an even embedding size, got {dim}")
    half = dim // 2
    freqs = max_positions ** (-jnp.arange(half, dtype=jnp.float32) / half)
    arg = jnp.asarray(t, jnp.float32) * freqs
    return jnp.concatenate([jnp.cos(arg), jnp.sin(arg)])


class FourierEmbedding(eqx.Module):
    """Random Fourier features (NCSN++): [cos(2 pi t b), sin(2 pi t b)], b ~ N(0, scale^2) fixed, `(dim,)`."""

    freqs: jax.Array

    def __init__(self, dim: int, *, scale: float = 16.0, key):
        if dim % 2:
            raise ValueError(f"dim: expected an even embedding size, got {dim}")
        self.freqs = scale * jr.normal(key, (dim // 2,))

    def __call__(self, t: jax.Array) -> jax.Array:
        # b is a fixed random draw (a buffer in NCSN++ and EDM, never trained); equinox treats
        # every array leaf as a parameter, so the gradient is cut here
        arg = 2 * jnp.pi * jnp.asarray(t) * jax.lax.stop_gradient(self.freqs)
        return jnp.concatenate([jnp.cos(arg), jnp.sin(arg)])


class NoiseEmbedding(eqx.Module):
    """Sinusoidal embedding of c_noise followed by a two-layer SiLU MLP: scalar -> `(dim,)`."""

    fc1: Pointwise
    fc2: Pointwise
    dim: int = eqx.field(static=True)

    def __init__(self, dim: int, *, key):
        k1, k2 = jr.split(key)
        self.dim = dim
        self.fc1 = Pointwise(dim, 4 * dim, key=k1)
        self.fc2 = Pointwise(4 * dim, dim, key=k2)

    def __call__(self, t: jax.Array) -> jax.Array:
        e = sinusoidal_embedding(t, self.dim, max_positions=math.e**4 * 100)
        return self.fc2(jax.nn.silu(self.fc1(e)))
