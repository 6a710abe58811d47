"""Fourier neural operator (Li et al. 2021) with optional domain padding, dropout and noise conditioning.

v_0 = P(x, pos);  v_{l+1} = gelu(K_l v_l + W_l v_l + b_l(t)) [+ channel MLP with dropout];
y = Q(v_L), with K_l a `SpectralConv`, W_l a pointwise linear map, P and Q pointwise (Q a
two-layer MLP) and b_l(t) a FiLM bias from the noise embedding (diffusion backbones only).

Resolution independence: spectral weights act on Fourier coefficients of the underlying
function and every other layer is pointwise, so a model trained at 32 x 32 evaluates at
64 x 64 (up to aliasing of the nonlinearity's harmonics). Position features are
sin/cos(2 pi x) (band-limited) rather than raw coordinates. `padding` > 0 zero-pads
the lifted field by that fraction of the grid on the high side of each axis (non-
periodic data, Kossaifi et al. 2023); the fraction keeps the padded domain the same
physical size at every resolution.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks
from posteriorjax.nn.embeddings import NoiseEmbedding
from posteriorjax.nn.layers import ChannelMLP, Pointwise, SpectralConv, check_channels, periodic_coordinates


class FNO(eqx.Module):
    """FNO `(C_in, H, W) -> (C_out, H, W)`; `__call__(x, t=None, *, key=None)`.

    Attributes:
      in_channels, out_channels: field channels.
      modes: Fourier modes kept per axis (|k_y| < modes, 0 <= k_x < modes).
      width: hidden channels; layers: number of Fourier layers.
      padding: domain padding fraction (0 for periodic data).
      dropout: channel-MLP dropout rate (0: no channel MLP); active only when `key` is given.
      embed_dim: noise-embedding size (0: unconditional; then `t` must be None).
    """

    lift: Pointwise
    spectral: tuple[SpectralConv, ...]
    skips: tuple[Pointwise, ...]
    mlps: tuple[ChannelMLP, ...] | None
    films: tuple[Pointwise, ...] | None
    embed: NoiseEmbedding | None
    project: ChannelMLP
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    padding: float = eqx.field(static=True)
    positional: bool = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        modes: int = 12,
        width: int = 32,
        layers: int = 4,
        padding: float = 0.0,
        dropout: float = 0.0,
        embed_dim: int = 0,
        positional: bool = True,
        projection: int = 128,
        key,
    ):
        checks.positive_ints(layers=layers, width=width)
        if not 0.0 <= padding < 1.0:
            raise ValueError(f"padding: expected a fraction in [0, 1), got {padding!r}")
        keys = jr.split(key, 4 * layers + 3)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.padding, self.positional = float(padding), bool(positional)
        self.lift = Pointwise(in_channels + 4 * positional, width, key=keys[0])
        self.spectral = tuple(
            SpectralConv(width, width, (modes, modes), key=keys[3 + i]) for i in range(layers)
        )
        self.skips = tuple(Pointwise(width, width, key=keys[3 + layers + i]) for i in range(layers))
        self.mlps = (
            tuple(
                ChannelMLP(width, width, width, dropout=dropout, key=keys[3 + 2 * layers + i])
                for i in range(layers)
            )
            if dropout > 0
            else None
        )
        if embed_dim:
            self.embed = NoiseEmbedding(embed_dim, key=keys[1])
            self.films = tuple(
                Pointwise(embed_dim, width, key=keys[3 + 3 * layers + i]) for i in range(layers)
            )
        else:
            self.embed, self.films = None, None
        self.project = ChannelMLP(width, projection, out_channels, key=keys[2])

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        check_channels(x, self.in_channels)
        if (t is None) != (self.embed is None):
            raise ValueError(
                f"t: expected {'a noise level' if self.embed else 'None'} for this FNO, got {t!r}"
            )
        h, w = x.shape[-2:]
        if self.positional:
            x = jnp.concatenate([x, periodic_coordinates((h, w), x.dtype)])
        v = self.lift(x)
        ph, pw = round(self.padding * h), round(self.padding * w)
        if ph or pw:
            v = jnp.pad(v, ((0, 0), (0, ph), (0, pw)))
        emb = None if self.embed is None else jax.nn.silu(self.embed(t))
        keys = [None] * len(self.spectral) if key is None else list(jr.split(key, len(self.spectral)))
        for i, (k_op, w_op) in enumerate(zip(self.spectral, self.skips, strict=True)):
            y = k_op(v) + w_op(v)
            if emb is not None:
                y = y + self.films[i](emb)[:, None, None]
            y = jax.nn.gelu(y) if i < len(self.spectral) - 1 or self.mlps is not None else y
            if self.mlps is not None:
                y = y + self.mlps[i](y, key=keys[i])
            v = y
        v = v[:, :h, :w]
        return self.project(v)
