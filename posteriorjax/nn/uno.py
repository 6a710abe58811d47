"""U-shaped neural operator (UNO, Rahman et al. 2023; U-FNO style skips).

Encoder level l maps v on an `n / 2^l` grid to the `n / 2^(l+1)` grid with a Fourier
integral operator evaluated on the coarser grid plus a band-limited resampled pointwise
bypass: v_{l+1} = gelu(K_l v_l |_(n/2^(l+1)) + W_l R(v_l) + b_l(t)). The decoder mirrors it,
concatenating the encoder feature of matching resolution (U-Net skip) before each
up-sampling operator. Every grid change is a fraction of the input size and every
operator acts on Fourier coefficients, so the network is resolution independent like
the FNO. Level l keeps `max(1, modes // 2^l)` modes per axis.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks
from posteriorjax.nn.embeddings import NoiseEmbedding
from posteriorjax.nn.layers import (
    ChannelMLP,
    Pointwise,
    SpectralConv,
    check_channels,
    periodic_coordinates,
    spectral_resample,
)


class _Block(eqx.Module):
    op: SpectralConv
    skip: Pointwise
    film: Pointwise | None

    def __init__(self, cin, cout, modes, embed_dim, *, key):
        k1, k2, k3 = jr.split(key, 3)
        self.op = SpectralConv(cin, cout, (modes, modes), key=k1)
        self.skip = Pointwise(cin, cout, key=k2)
        self.film = Pointwise(embed_dim, cout, key=k3) if embed_dim else None

    def __call__(self, v, size, emb):
        y = self.op(v, out_size=size) + self.skip(spectral_resample(v, size))
        if emb is not None:
            y = y + self.film(emb)[:, None, None]
        return jax.nn.gelu(y)


class UNO(eqx.Module):
    """U-shaped neural operator `(C_in, H, W) -> (C_out, H, W)`; `__call__(x, t=None, *, key=None)`.

    Attributes:
      width: channels at the finest level (doubled at each coarser level).
      depth: number of 2x coarsenings (H and W must be divisible by 2^depth).
      modes: Fourier modes at the finest level.
      embed_dim: noise-embedding size (0: unconditional).
    """

    lift: Pointwise
    down: tuple[_Block, ...]
    mid: _Block
    up: tuple[_Block, ...]
    embed: NoiseEmbedding | None
    project: ChannelMLP
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        modes: int = 12,
        width: int = 32,
        depth: int = 2,
        embed_dim: int = 0,
        projection: int = 128,
        key,
    ):
        depth = checks.positive_int("depth", depth)
        keys = iter(jr.split(key, 2 * depth + 4))
        widths = [width * 2**level for level in range(depth + 1)]
        lm = [max(1, modes // 2**level) for level in range(depth + 1)]
        self.in_channels, self.out_channels, self.depth = in_channels, out_channels, depth
        self.lift = Pointwise(in_channels + 4, width, key=next(keys))
        self.down = tuple(
            _Block(widths[i], widths[i + 1], lm[i + 1], embed_dim, key=next(keys)) for i in range(depth)
        )
        self.mid = _Block(widths[depth], widths[depth], lm[depth], embed_dim, key=next(keys))
        self.up = tuple(
            _Block(2 * widths[i + 1], widths[i], lm[i + 1], embed_dim, key=next(keys))
            for i in reversed(range(depth))
        )
        self.embed = NoiseEmbedding(embed_dim, key=next(keys)) if embed_dim else None
        self.project = ChannelMLP(2 * width, projection, out_channels, key=next(keys))

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        del key  # no stochastic layers
        check_channels(x, self.in_channels)
        if (t is None) != (self.embed is None):
            raise ValueError(
                f"t: expected {'a noise level' if self.embed else 'None'} for this UNO, got {t!r}"
            )
        h, w = x.shape[-2:]
        if h % 2**self.depth or w % 2**self.depth:
            raise ValueError(f"x: expected H, W divisible by 2^depth = {2**self.depth}, got {(h, w)}")
        emb = None if self.embed is None else jax.nn.silu(self.embed(t))
        v = self.lift(jnp.concatenate([x, periodic_coordinates((h, w), x.dtype)]))
        skips = [v]
        for i, block in enumerate(self.down):
            v = block(v, (h >> (i + 1), w >> (i + 1)), emb)
            skips.append(v)
        v = self.mid(v, v.shape[-2:], emb)
        for j, block in enumerate(self.up):
            level = self.depth - 1 - j
            v = block(jnp.concatenate([v, skips.pop()]), (h >> level, w >> level), emb)
        return self.project(jnp.concatenate([v, skips.pop()]))
