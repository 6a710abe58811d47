"""Grid U-Net: the grid-based diffusion backbone (DDPM++-style residual blocks, no attention).

Each level has `blocks` residual blocks h = x + conv(silu(gn(conv(silu(gn(x))) + b(t)))), then a
2x average-pool down-sample; the decoder up-samples (nearest) and concatenates the
encoder feature of matching resolution. Convolutions are 3x3 with zero padding, so the
network is tied to its grid spacing (unlike the FNO/UNO) and H, W must be divisible by
2^(levels - 1). The output convolution starts at zero, so an untrained denoiser is the
c_skip-only one.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn.embeddings import NoiseEmbedding
from posteriorjax.nn.layers import Pointwise, check_channels


def _groups(channels: int) -> int:
    for g in (8, 4, 2, 1):
        if channels % g == 0:
            return g
    return 1


class _ResBlock(eqx.Module):
    norm1: eqx.nn.GroupNorm
    conv1: eqx.nn.Conv2d
    norm2: eqx.nn.GroupNorm
    conv2: eqx.nn.Conv2d
    film: Pointwise | None
    shortcut: Pointwise | None

    def __init__(self, cin, cout, embed_dim, *, key):
        k1, k2, k3, k4 = jr.split(key, 4)
        self.norm1 = eqx.nn.GroupNorm(_groups(cin), cin)
        self.conv1 = eqx.nn.Conv2d(cin, cout, 3, padding=1, key=k1)
        self.norm2 = eqx.nn.GroupNorm(_groups(cout), cout)
        self.conv2 = eqx.nn.Conv2d(cout, cout, 3, padding=1, key=k2)
        self.film = Pointwise(embed_dim, cout, key=k3) if embed_dim else None
        self.shortcut = Pointwise(cin, cout, key=k4) if cin != cout else None

    def __call__(self, x, emb):
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        if emb is not None:
            h = h + self.film(emb)[:, None, None]
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        return (x if self.shortcut is None else self.shortcut(x)) + h


class UNet(eqx.Module):
    """U-Net `(C_in, H, W) -> (C_out, H, W)`; `__call__(x, t=None, *, key=None)`.

    Attributes:
      channels: feature channels per level, e.g. (32, 64, 64).
      blocks: residual blocks per level.
      embed_dim: noise-embedding size (0: unconditional).
    """

    inp: eqx.nn.Conv2d
    down: tuple[tuple[_ResBlock, ...], ...]
    mid: _ResBlock
    up: tuple[tuple[_ResBlock, ...], ...]
    out_norm: eqx.nn.GroupNorm
    out: eqx.nn.Conv2d
    embed: NoiseEmbedding | None
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        channels: tuple[int, ...] = (32, 64, 64),
        blocks: int = 1,
        embed_dim: int = 0,
        key,
    ):
        channels = tuple(int(c) for c in channels)
        if not channels or blocks < 1:
            raise ValueError(
                f"channels, blocks: expected a non-empty tuple and >= 1, got {channels!r}, {blocks!r}"
            )
        keys = iter(jr.split(key, 4 + 2 * len(channels) * (blocks + 1) + 2))
        self.in_channels, self.out_channels = in_channels, out_channels
        self.inp = eqx.nn.Conv2d(in_channels, channels[0], 3, padding=1, key=next(keys))
        down, c = [], channels[0]
        for ch in channels:
            level = []
            for _ in range(blocks):
                level.append(_ResBlock(c, ch, embed_dim, key=next(keys)))
                c = ch
            down.append(tuple(level))
        self.down = tuple(down)
        self.mid = _ResBlock(c, c, embed_dim, key=next(keys))
        up = []
        for ch in reversed(channels):
            level = [_ResBlock(c + ch, ch, embed_dim, key=next(keys))]
            for _ in range(blocks - 1):
                level.append(_ResBlock(ch, ch, embed_dim, key=next(keys)))
            c = ch
            up.append(tuple(level))
        self.up = tuple(up)
        self.out_norm = eqx.nn.GroupNorm(_groups(c), c)
        out = eqx.nn.Conv2d(c, out_channels, 3, padding=1, key=next(keys))
        self.out = eqx.tree_at(lambda m: (m.weight, m.bias), out, replace_fn=jnp.zeros_like)
        self.embed = NoiseEmbedding(embed_dim, key=next(keys)) if embed_dim else None

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        del key
        check_channels(x, self.in_channels)
        if (t is None) != (self.embed is None):
            raise ValueError(
                f"t: expected {'a noise level' if self.embed else 'None'} for this U-Net, got {t!r}"
            )
        levels = len(self.down)
        h, w = x.shape[-2:]
        if h % 2 ** (levels - 1) or w % 2 ** (levels - 1):
            raise ValueError(f"x: expected H, W divisible by {2 ** (levels - 1)}, got {(h, w)}")
        emb = None if self.embed is None else jax.nn.silu(self.embed(t))
        v = self.inp(x)
        skips = []
        for i, level in enumerate(self.down):
            for block in level:
                v = block(v, emb)
            skips.append(v)
            if i < levels - 1:
                c, hh, ww = v.shape
                v = v.reshape(c, hh // 2, 2, ww // 2, 2).mean(axis=(2, 4))
        v = self.mid(v, emb)
        for j, level in enumerate(self.up):
            if j > 0:
                v = jnp.repeat(jnp.repeat(v, 2, axis=1), 2, axis=2)
            v = jnp.concatenate([v, skips.pop()])
            for block in level:
                v = block(v, emb)
        return self.out(jax.nn.silu(self.out_norm(v)))
