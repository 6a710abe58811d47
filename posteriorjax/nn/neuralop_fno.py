"""The neuralop FNO (`neuralop.models.FNO`, neuraloperator 1.0.2, postactivation) in Equinox.

The FNO the PosteriorBench baselines train (Fun-DDPS surrogate, DDIS ``fno_pad`` surrogate, ECI
velocity, MC-dropout inverse network), layer by layer:

    v = lift([x, grid])                     two pointwise layers, GELU between, hidden lifting_ratio * width
    v = pad(v)                              one-sided zero padding, round(padding * n) per axis
    for l < L:                              (last layer: no GELU)
        z = gelu(K_l v + b_l + W_l v)       K_l spectral (`SpectralConv`), b_l its bias, W_l linear, no bias
        v = gelu(MLP_l(z) + g_l * v)        channel MLP C -> C/2 -> C with dropout after each layer,
                                            g_l a per-channel soft gate
    y = project(unpad(v))                   two pointwise layers, hidden projection_ratio * width

`gelu` is torch's default `F.gelu`, the exact x Phi(x) (not the tanh approximation).
`grid` is neuralop's `GridEmbeddingND`: x_j = j / n on each axis (two channels, appended last).
`modes` counts Fourier modes the neuralop way: n_modes = (modes, modes) keeps k_y in
[-modes/2, modes/2) and 0 <= k_x <= modes/2, i.e. our `SpectralConv((modes/2, modes/2 + 1))`.
`time_channels` > 0 is the ECI velocity (`training_eci/flow.py` `ECIFNOVectorField`): the flow
time t enters as `time_embedding(t, time_channels)` broadcast over the grid and concatenated to
the input. `reflect_pad` is DDIS's ``FNO_pad`` (`training_ddis/surrogate.py`): the input is
reflect-padded by (H // 2, W // 2) on every side, the FNO applied, the result cropped.
Everything after the last spectral convolution acts point by point, so it is evaluated on the
kept window only (the crop, or the unpadded grid): the same values, and under ``reflect_pad`` a
quarter of the points (timed against the full-grid form in docs/studies/performance.md, "The
neuralop FNO's training step"). With dropout active (a `key` and a nonzero rate)
the whole grid is kept, so the dropout masks are those of the full-grid form.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks
from posteriorjax.nn.layers import Dropout, Pointwise, SpectralConv, check_channels


@jax.custom_jvp
def gelu(x: jax.Array) -> jax.Array:
    """neuraloperator's activation, torch's `F.gelu`: the exact x Phi(x) = x (1 + erf(x / sqrt 2)) / 2.

    torch's formula, by erf; `jax.nn.gelu(approximate=False)` evaluates the same function by
    erfc, which XLA's CPU backend computes about 2.5x slower. The derivative Phi(x) + x phi(x)
    is written out (`custom_jvp`) so the reverse pass shares one erf and one exp per point.
    """
    return 0.5 * x * (1 + jax.lax.erf(x * _SQRT_HALF))


@gelu.defjvp
def _gelu_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    cdf = 0.5 * (1 + jax.lax.erf(x * _SQRT_HALF))
    pdf = jnp.exp(-0.5 * x * x) * _INV_SQRT_2PI
    return x * cdf, (cdf + x * pdf) * dx


_SQRT_HALF, _INV_SQRT_2PI = math.sqrt(0.5), 1 / math.sqrt(2 * math.pi)


def soft_gate(gate: jax.Array, v: jax.Array) -> jax.Array:
    """neuralop's `SoftGating`, a per-channel scale: `gate (C,)`, `v (C, H, W) -> (C, H, W)`.

    Written as the product with diag(gate) rather than a broadcast multiply: with the multiply
    (and a gate that is not all ones, as in any trained network) XLA's CPU backend recomputes the
    gated residual chain inside the reverse pass, and a forward + input VJP takes 1.7x as long
    (docs/studies/performance.md). At full float32 precision on every backend, the product
    equals the multiply to rounding for finite `v`.
    """
    return jnp.einsum("oi,ihw->ohw", jnp.diag(gate), v, precision=jax.lax.Precision.HIGHEST)


def time_embedding(t: jax.Array, dim: int, max_positions: float = 2000.0) -> jax.Array:
    """ECI's `get_time_embedding` `(dim,)`: [sin(2000 t w_i), cos(2000 t w_i)],
    w_i = 2000^(-i / (dim/2 - 1))."""
    half = dim // 2
    scale = math.log(max_positions) / max(half - 1, 1)
    freqs = jnp.exp(-scale * jnp.arange(half, dtype=jnp.float32))
    arg = jnp.asarray(t, jnp.float32) * max_positions * freqs
    emb = jnp.concatenate([jnp.sin(arg), jnp.cos(arg)])
    return jnp.pad(emb, (0, dim % 2))


def grid_embedding(shape: tuple[int, int], dtype=jnp.float32) -> jax.Array:
    """neuralop's `GridEmbeddingND` on [0, 1]^2: `(2, H, W)`, x_j = j / n (endpoint excluded)."""
    y = jnp.arange(shape[0], dtype=dtype) / shape[0]
    x = jnp.arange(shape[1], dtype=dtype) / shape[1]
    return jnp.stack(jnp.meshgrid(y, x, indexing="ij"))


class _MLP(eqx.Module):
    """neuralop `ChannelMLP` with two layers: fc2(drop(gelu(fc1 x))), dropout after fc2 as well."""

    fc1: Pointwise
    fc2: Pointwise
    dropout: Dropout

    def __init__(self, cin, hidden, cout, dropout=0.0, *, key):
        k1, k2 = jr.split(key)
        self.fc1, self.fc2 = Pointwise(cin, hidden, key=k1), Pointwise(hidden, cout, key=k2)
        self.dropout = Dropout(dropout)

    def __call__(self, x, *, key=None):
        k1, k2 = (None, None) if key is None else jr.split(key)
        h = self.dropout(gelu(self.fc1(x)), key=k1)
        return self.dropout(self.fc2(h), key=k2)


class NeuralopFNO(eqx.Module):
    """neuralop FNO `(C_in, H, W) -> (C_out, H, W)`; `__call__(x, t=None, *, key=None)` (module doc).

    Attributes:
      modes: n_modes per axis, neuralop convention (even); width: hidden channels; layers: L.
      lifting_ratio, projection_ratio: hidden widths of the lifting / projection MLPs (x width;
        lifting_ratio 0 is a single linear lifting layer).
      padding: one-sided domain padding fraction; dropout: channel-MLP dropout (active with a `key`).
      channel_mlp_expansion: hidden fraction of the in-block channel MLPs (neuralop 0.5).
      time_channels: size of the concatenated flow-time embedding (0: no t input).
      reflect_pad: DDIS ``FNO_pad`` input reflection padding.
    """

    lift: _MLP | Pointwise
    spectral: tuple[SpectralConv, ...]
    biases: jax.Array
    skip_weights: jax.Array
    mlps: tuple[_MLP, ...]
    gates: jax.Array
    project: _MLP
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    padding: float = eqx.field(static=True)
    time_channels: int = eqx.field(static=True)
    reflect_pad: bool = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        modes: int = 16,
        width: int = 64,
        layers: int = 4,
        lifting_ratio: int = 2,
        projection_ratio: int = 2,
        padding: float = 0.0,
        dropout: float = 0.0,
        channel_mlp_expansion: float = 0.5,
        time_channels: int = 0,
        reflect_pad: bool = False,
        key,
    ):
        checks.positive_ints(layers=layers, width=width, modes=modes)
        if modes % 2:
            raise ValueError(f"modes: expected an even neuralop mode count, got {modes}")
        if not 0.0 <= padding < 1.0:
            raise ValueError(f"padding: expected a fraction in [0, 1), got {padding!r}")
        if time_channels < 0 or lifting_ratio < 0:
            raise ValueError(
                f"time_channels, lifting_ratio: expected >= 0, got {time_channels!r}, {lifting_ratio!r}"
            )
        keys = jr.split(key, 3 * layers + 3)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.padding, self.time_channels = float(padding), int(time_channels)
        self.reflect_pad = bool(reflect_pad)
        cin = in_channels + time_channels + 2
        self.lift = (
            _MLP(cin, lifting_ratio * width, width, key=keys[0])
            if lifting_ratio
            else Pointwise(cin, width, key=keys[0])
        )
        spectral_modes = (modes // 2, modes // 2 + 1)
        self.spectral = tuple(
            SpectralConv(width, width, spectral_modes, key=keys[3 + i]) for i in range(layers)
        )
        self.biases = math.sqrt(2 / (2 * width)) * jr.normal(keys[1], (layers, width))
        # the linear FNO skips W_l have no bias (neuralop `Flattened1dConv(bias=False)`)
        self.skip_weights = jr.normal(keys[3 + layers], (layers, width, width)) / math.sqrt(width)
        hidden = round(width * channel_mlp_expansion)
        self.mlps = tuple(
            _MLP(width, hidden, width, dropout, key=keys[3 + 2 * layers + i]) for i in range(layers)
        )
        self.gates = jnp.ones((layers, width))
        self.project = _MLP(width, projection_ratio * width, out_channels, key=keys[2])

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        check_channels(x, self.in_channels)
        if (t is None) != (self.time_channels == 0):
            raise ValueError(
                f"t: expected {'the flow time' if self.time_channels else 'None'} for this FNO, got {t!r}"
            )
        h, w = x.shape[-2:]
        if self.reflect_pad:
            x = jnp.pad(x, ((0, 0), (h // 2, h // 2), (w // 2, w // 2)), mode="reflect")
        if self.time_channels:
            emb = time_embedding(t, self.time_channels).astype(x.dtype)
            x = jnp.concatenate([x, jnp.broadcast_to(emb[:, None, None], (emb.shape[0], *x.shape[1:]))])
        x = jnp.concatenate([x, grid_embedding(x.shape[-2:], x.dtype)])
        v = self.lift(x)
        hh, ww = v.shape[-2:]
        v = jnp.pad(v, ((0, 0), (0, round(self.padding * hh)), (0, round(self.padding * ww))))
        # the kept window: the unpadded grid, inside it the reflect-padding crop
        rows, cols = (
            (slice(h // 2, h // 2 + h), slice(w // 2, w // 2 + w))
            if self.reflect_pad
            else (slice(0, hh), slice(0, ww))
        )
        n = len(self.spectral)
        keys = [None] * n if key is None else list(jr.split(key, n))
        # after the last spectral convolution every operation is per point: evaluate them on the
        # kept window only (the same values; a quarter of the points under reflect_pad), unless
        # dropout draws its mask over the whole grid
        crop_early = key is None or self.mlps[-1].dropout.rate == 0.0
        for i in range(n):
            k_v = self.spectral[i](v)
            if i == n - 1 and crop_early:
                k_v, v = k_v[:, rows, cols], v[:, rows, cols]
            skip = jnp.einsum("oi,ihw->ohw", self.skip_weights[i], v)
            z = k_v + self.biases[i][:, None, None] + skip
            z = gelu(z) if i < n - 1 else z
            z = self.mlps[i](z, key=keys[i]) + soft_gate(self.gates[i], v)
            v = gelu(z) if i < n - 1 else z
        return self.project(v if crop_early else v[:, rows, cols])
