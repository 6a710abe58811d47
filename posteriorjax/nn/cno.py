"""Convolutional neural operator (CNO, Raonic et al. 2023): a U-shaped CNN with anti-aliased resampling.

Fields are treated as samples of band-limited functions. Every change of grid is a
filtered (FFT) resampling, `layers.spectral_resample`: the rfft2 spectrum is truncated
(down-sampling: an ideal sinc low-pass, so no mode above the new Nyquist frequency folds
back) or zero-padded (up-sampling: exact band-limited interpolation). A pointwise
nonlinearity creates harmonics above the grid's band, so it is applied on a grid of twice
the input resolution and the result is low-pass filtered onto the output grid
(`aa_activation`): sigma(v) |_out = R_out sigma(R_2n v). With a polynomial activation of
degree 2 this is exact (the harmonics of a band-limited field fit on the 2x grid).

Architecture (channel-first, no batch axis):
  lift      v_0 = act_{n -> n}(conv3(x))                                 width c_0
  encoder   v_{l+1} = act_{n_l -> n_l / 2}(conv3(v_l))                     c_{l+1} = 2 c_l
  skips     s_l = res_blocks(v_l), r(v) = v + conv3(act_{n -> n}(conv3(v)))
  decoder   v = act_{n_{l+1} -> n_l}(conv3([v, s_{l+1}])), from the bottleneck upward
  project   y = conv3(act_{n -> n}(conv3([v, s_0])))
Convolutions are 3x3 with zero padding (the FFT resampling itself treats the field as
periodic); H and W must be divisible by 2^depth. With `embed_dim` > 0 a FiLM bias of the
noise embedding is added before every activation (diffusion backbone).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn.embeddings import NoiseEmbedding
from posteriorjax.nn.layers import Pointwise, check_channels, spectral_resample


def aa_activation(
    v: jax.Array, out_size: tuple[int, int], activation: Callable[[jax.Array], jax.Array] = jax.nn.gelu
) -> jax.Array:
    """Anti-aliased activation `(C, H, W) -> (C, *out_size)`: R_out activation(R_(2H, 2W) v).

    The activation acts on the field band-limited-interpolated to twice the input
    resolution; the result is low-pass filtered (FFT truncation) onto `out_size`.
    """
    h, w = v.shape[-2:]
    return spectral_resample(activation(spectral_resample(v, (2 * h, 2 * w))), tuple(out_size))


class _Conv(eqx.Module):
    conv: eqx.nn.Conv2d
    film: Pointwise | None

    def __init__(self, cin, cout, embed_dim, *, key):
        k1, k2 = jr.split(key)
        self.conv = eqx.nn.Conv2d(cin, cout, 3, padding=1, key=k1)
        self.film = Pointwise(embed_dim, cout, key=k2) if embed_dim else None

    def __call__(self, v, emb):
        y = self.conv(v)
        return y if emb is None else y + self.film(emb)[:, None, None]


class _ResBlock(eqx.Module):
    conv1: _Conv
    conv2: _Conv

    def __init__(self, channels, embed_dim, *, key):
        k1, k2 = jr.split(key)
        self.conv1 = _Conv(channels, channels, embed_dim, key=k1)
        self.conv2 = _Conv(channels, channels, 0, key=k2)

    def __call__(self, v, emb, activation):
        return v + self.conv2(aa_activation(self.conv1(v, emb), v.shape[-2:], activation), None)


class CNO(eqx.Module):
    """CNO `(C_in, H, W) -> (C_out, H, W)`; `__call__(x, t=None, *, key=None)`.

    Attributes:
      width: channels at the finest level (doubled at each coarser level).
      depth: number of 2x coarsenings (H, W divisible by 2^depth).
      res_blocks: residual blocks on every skip connection and at the bottleneck.
      activation: pointwise nonlinearity (applied at 2x resolution).
      embed_dim: noise-embedding size (0: unconditional; then `t` must be None).
    """

    lift: _Conv
    down: tuple[_Conv, ...]
    skips: tuple[tuple[_ResBlock, ...], ...]
    up: tuple[_Conv, ...]
    project_hidden: _Conv
    project_out: _Conv
    embed: NoiseEmbedding | None
    activation: Callable = eqx.field(static=True)
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        width: int = 32,
        depth: int = 2,
        res_blocks: int = 1,
        activation: Callable[[jax.Array], jax.Array] = jax.nn.gelu,
        embed_dim: int = 0,
        key,
    ):
        if depth < 1 or width < 1 or res_blocks < 0:
            raise ValueError(
                f"depth, width, res_blocks: expected positive, positive, non-negative integers, "
                f"got {depth!r}, {width!r}, {res_blocks!r}"
            )
        keys = iter(jr.split(key, 3 * depth + (depth + 1) * res_blocks + 5))
        c = [width * 2**level for level in range(depth + 1)]
        self.in_channels, self.out_channels, self.depth = in_channels, out_channels, depth
        self.activation = activation
        self.lift = _Conv(in_channels, c[0], embed_dim, key=next(keys))
        self.down = tuple(_Conv(c[i], c[i + 1], embed_dim, key=next(keys)) for i in range(depth))
        self.skips = tuple(
            tuple(_ResBlock(c[i], embed_dim, key=next(keys)) for _ in range(res_blocks))
            for i in range(depth + 1)
        )
        # decoder level l receives [v, s_(l+1)]; the bottleneck's v is s_depth itself
        self.up = tuple(
            _Conv(c[i + 1] * (1 if i == depth - 1 else 2), c[i], embed_dim, key=next(keys))
            for i in reversed(range(depth))
        )
        self.project_hidden = _Conv(2 * c[0], c[0], embed_dim, key=next(keys))
        self.project_out = _Conv(c[0], out_channels, 0, key=next(keys))
        self.embed = NoiseEmbedding(embed_dim, key=next(keys)) if embed_dim else None

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        del key  # no stochastic layers
        check_channels(x, self.in_channels)
        if (t is None) != (self.embed is None):
            raise ValueError(
                f"t: expected {'a noise level' if self.embed else 'None'} for this CNO, got {t!r}"
            )
        h, w = x.shape[-2:]
        if h % 2**self.depth or w % 2**self.depth:
            raise ValueError(f"x: expected H, W divisible by 2^depth = {2**self.depth}, got {(h, w)}")
        emb = None if self.embed is None else jax.nn.silu(self.embed(t))
        act = self.activation

        def skip(level, v):
            for block in self.skips[level]:
                v = block(v, emb, act)
            return v

        v = aa_activation(self.lift(x, emb), (h, w), act)
        features = []
        for level, conv in enumerate(self.down):
            features.append(skip(level, v))
            v = aa_activation(conv(v, emb), (h >> (level + 1), w >> (level + 1)), act)
        v = skip(self.depth, v)
        for j, conv in enumerate(self.up):
            level = self.depth - 1 - j
            inp = v if j == 0 else jnp.concatenate([v, features[level + 1]])
            v = aa_activation(conv(inp, emb), (h >> level, w >> level), act)
        v = aa_activation(self.project_hidden(jnp.concatenate([v, features[0]]), emb), (h, w), act)
        return self.project_out(v, None)
