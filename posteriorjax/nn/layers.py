"""Building blocks shared by the networks: pointwise linear maps, dropout, spectral convolution.

All layers act on one field `(C, H, W)` (channel-first, no batch axis); vmap outward.
Stochastic layers take an optional `key`: `key=None` is evaluation mode (deterministic),
a key switches dropout on -- during training, and at inference for MC dropout.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr


def _check_channels(x: jax.Array, expected: int, name: str = "x") -> None:
    if x.ndim != 3 or x.shape[0] != expected:
        raise ValueError(f"{name}: expected a field (C={expected}, H, W), got shape {x.shape}")


class Pointwise(eqx.Module):
    """Per-point linear map (a 1x1 convolution): `(C_in, H, W) -> (C_out, H, W)`, y = W x + b."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, in_channels: int, out_channels: int, *, key, zero: bool = False):
        scale = 0.0 if zero else 1.0 / math.sqrt(in_channels)
        self.weight = scale * jr.normal(key, (out_channels, in_channels))
        self.bias = jnp.zeros((out_channels,))

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.einsum("oi,i...->o...", self.weight, x) + self.bias.reshape(-1, *([1] * (x.ndim - 1)))


class Dropout(eqx.Module):
    """Inverted dropout with rate `rate`; active only when a `key` is passed (MC dropout: pass one)."""

    rate: float = eqx.field(static=True)

    def __check_init__(self):
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"rate: expected a dropout rate in [0, 1), got {self.rate!r}")

    def __call__(self, x: jax.Array, *, key=None) -> jax.Array:
        if key is None or self.rate == 0.0:
            return x
        keep = jr.bernoulli(key, 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0).astype(x.dtype)


class ChannelMLP(eqx.Module):
    """Two pointwise layers with GELU and dropout between: `(C, H, W) -> (C_out, H, W)`."""

    fc1: Pointwise
    fc2: Pointwise
    dropout: Dropout

    def __init__(self, in_channels: int, hidden: int, out_channels: int, *, dropout: float = 0.0, key):
        k1, k2 = jr.split(key)
        self.fc1 = Pointwise(in_channels, hidden, key=k1)
        self.fc2 = Pointwise(hidden, out_channels, key=k2)
        self.dropout = Dropout(dropout)

    def __call__(self, x: jax.Array, *, key=None) -> jax.Array:
        return self.fc2(self.dropout(jax.nn.gelu(self.fc1(x)), key=key))


def spectral_resample(x: jax.Array, size: tuple[int, int]) -> jax.Array:
    """Band-limited resampling of periodic fields `(..., H, W) -> (..., size)`.

    Truncates or zero-pads the rfft2 spectrum; point values of a trigonometric
    polynomial resolved on both grids are preserved exactly.
    """
    h, w = x.shape[-2:]
    if (h, w) == tuple(size):
        return x
    sh, sw = size
    f = jnp.fft.rfft2(x)
    mh, mw = min(h, sh) // 2, min(w, sw) // 2 + 1
    out = jnp.zeros((*x.shape[:-2], sh, sw // 2 + 1), f.dtype)
    out = out.at[..., :mh, :mw].set(f[..., :mh, :mw])
    out = out.at[..., sh - mh :, :mw].set(f[..., h - mh :, :mw])
    return (jnp.fft.irfft2(out, s=size) * (sh * sw) / (h * w)).astype(x.dtype)


class SpectralConv(eqx.Module):
    """Fourier integral operator of the FNO (Li et al. 2021, Eq. 4) on rfft2 modes.

    (K v)(x) = irfft2( R(k) . rfft2(v)(k) ) with R a learned complex `(C_out, C_in)`
    matrix for |k_y| < modes[0], 0 <= k_x < modes[1] (two row blocks for k_y >= 0 and
    k_y < 0) and zero elsewhere. Unnormalized forward / 1/(HW) inverse FFTs make the
    operator act on the underlying function, so weights transfer across resolutions.
    `out_size` (a fraction of the input size, UNO-style) evaluates the result on a
    different grid.
    """

    weight_re: jax.Array
    weight_im: jax.Array
    modes: tuple[int, int] = eqx.field(static=True)

    def __init__(self, in_channels: int, out_channels: int, modes: tuple[int, int], *, key):
        m1, m2 = modes
        if m1 < 1 or m2 < 1:
            raise ValueError(f"modes: expected positive mode counts, got {modes!r}")
        scale = 1.0 / (in_channels * out_channels)
        k1, k2 = jr.split(key)
        shape = (2, out_channels, in_channels, m1, m2)
        self.weight_re = scale * jr.uniform(k1, shape)
        self.weight_im = scale * jr.uniform(k2, shape)
        self.modes = (int(m1), int(m2))

    def __call__(self, x: jax.Array, out_size: tuple[int, int] | None = None) -> jax.Array:
        h, w = x.shape[-2:]
        sh, sw = (h, w) if out_size is None else out_size
        m1, m2 = self.modes
        if 2 * m1 > min(h, sh) or m2 > min(w, sw) // 2 + 1:
            raise ValueError(
                f"x: grid {(h, w)} -> {(sh, sw)} resolves fewer Fourier modes than modes={self.modes}; "
                f"expected H, W >= {2 * m1}, {2 * (m2 - 1)}"
            )
        f = jnp.fft.rfft2(x)
        wgt = (self.weight_re + 1j * self.weight_im).astype(f.dtype)
        top = jnp.einsum("oixy,ixy->oxy", wgt[0], f[:, :m1, :m2])
        bottom = jnp.einsum("oixy,ixy->oxy", wgt[1], f[:, h - m1 :, :m2])
        out = jnp.zeros((wgt.shape[1], sh, sw // 2 + 1), f.dtype)
        out = out.at[:, :m1, :m2].set(top).at[:, sh - m1 :, :m2].set(bottom)
        return (jnp.fft.irfft2(out, s=(sh, sw)) * (sh * sw) / (h * w)).astype(x.dtype)


def periodic_coordinates(shape: tuple[int, int], dtype=jnp.float32) -> jax.Array:
    """Band-limited position features `(4, H, W)`: sin/cos(2 pi y), sin/cos(2 pi x) on x_j = j / n."""
    y = jnp.arange(shape[0], dtype=dtype) / shape[0]
    x = jnp.arange(shape[1], dtype=dtype) / shape[1]
    yy, xx = jnp.meshgrid(y, x, indexing="ij")
    t = 2 * jnp.pi
    return jnp.stack([jnp.sin(t * yy), jnp.cos(t * yy), jnp.sin(t * xx), jnp.cos(t * xx)])
