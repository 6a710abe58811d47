"""The FunDiff latent DiT (PosteriorBench `training_fundiff/models.py`, `DiT`): v(z_t, t | c).

`DiT(z (L, d_in), t scalar, c (L, d_in)) -> (L, d_out)` over a latent token set:

  h = Dense(z) + sincos_1d(emb_dim, 0..L-1) + Dense(c)      (condition tokens added one to one)
  e = Dense(SiLU(Dense(freq(t))))                          (N(0, 0.02^2) kernels)
  freq(t) = [cos(t w), sin(t w)],  w_k = exp(-log(10^4) k / 128), k < 128 (256 frequencies)
  depth x DiT block (adaLN-Zero on e):
      (a1, b1, g1, a2, b2, g2) = Dense_zero(GELU(e))         (6 x emb_dim, zero-initialized)
      h <- h + g1 * Attn(LN(h) (1 + b1) + a1)                 (LN without scale/bias, eps 1e-6;
      h <- h + g2 * Mlp(LN(h) (1 + b2) + a2)                   Glorot-uniform attention kernels)
  out = Dense(LN(h))                                         (LN with scale and bias, eps 1e-6)

The block takes GELU of the embedding (not SiLU as in Peebles & Xie) and the head is a plain
LayerNorm + dense (no adaLN final layer), as published. Published full size
(`configs/training/*_fundiff_dit.yml`): emb_dim 384, depth 16, num_heads 8, mlp_ratio 2, out 256.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn.transformer import Attention, Dense, LayerNorm, Mlp, layer_norm, sincos_1d

FREQUENCIES = 256
MAX_PERIOD = 10_000
EPS = 1e-6  # Flax's LayerNorm default, which the published DiT keeps


def timestep_embedding(t: jax.Array, dim: int = FREQUENCIES, max_period: int = MAX_PERIOD) -> jax.Array:
    """`(dim,)`: [cos(t w), sin(t w)], w_k = exp(-log(max_period) k / (dim/2)), k < dim/2."""
    half, dtype = dim // 2, jnp.result_type(float)  # float32, or float64 under `jax.enable_x64`
    freqs = jnp.exp(-jnp.log(float(max_period)) * jnp.arange(half, dtype=dtype) / half)
    args = jnp.asarray(t, dtype) * freqs
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)])


class DiTBlock(eqx.Module):
    """`(h (L, D), e (D,)) -> (L, D)`: adaLN-Zero modulated attention and MLP (see module doc)."""

    modulation: Dense
    attn: Attention
    mlp: Mlp

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, *, key):
        km, ka, kf = jr.split(key, 3)
        self.modulation = Dense(dim, 6 * dim, key=km, init="zeros")
        self.attn = Attention(dim, dim, dim, num_heads, key=ka, init="xavier")
        self.mlp = Mlp(dim, int(dim * mlp_ratio), dim, key=kf)

    def __call__(self, h: jax.Array, e: jax.Array) -> jax.Array:
        a1, b1, g1, a2, b2, g2 = jnp.split(self.modulation(jax.nn.gelu(e)), 6)
        x = layer_norm(h, EPS) * (1 + b1) + a1
        h = h + g1 * self.attn(x, x)
        x = layer_norm(h, EPS) * (1 + b2) + a2
        return h + g2 * self.mlp(x)


class DiT(eqx.Module):
    """Latent velocity `net(z (L, in_channels), t, c (L, in_channels)) -> (L, out_channels)`."""

    embed: Dense
    embed_condition: Dense
    time1: Dense
    time2: Dense
    blocks: list
    norm: LayerNorm
    head: Dense
    emb_dim: int = eqx.field(static=True)

    def __init__(self, in_channels: int, out_channels: int, *, key, emb_dim, depth, num_heads, mlp_ratio):
        ke, kc, kt1, kt2, kb, kh = jr.split(key, 6)
        self.emb_dim = int(emb_dim)
        self.embed = Dense(in_channels, emb_dim, key=ke)
        self.embed_condition = Dense(in_channels, emb_dim, key=kc)
        self.time1 = Dense(FREQUENCIES, emb_dim, key=kt1, init="normal")
        self.time2 = Dense(emb_dim, emb_dim, key=kt2, init="normal")
        self.blocks = [DiTBlock(emb_dim, num_heads, mlp_ratio, key=k) for k in jr.split(kb, depth)]
        self.norm = LayerNorm(emb_dim, EPS)
        self.head = Dense(emb_dim, out_channels, key=kh)

    def time_embedding(self, t) -> jax.Array:
        return self.time2(jax.nn.silu(self.time1(timestep_embedding(t))))

    def __call__(self, z: jax.Array, t, c: jax.Array) -> jax.Array:
        if z.ndim != 2 or c.shape != z.shape:
            raise ValueError(f"z, c: expected two (L, D) token sets of one shape, got {z.shape}, {c.shape}")
        e = self.time_embedding(t).astype(z.dtype)
        h = self.embed(z) + sincos_1d(self.emb_dim, jnp.arange(z.shape[0])).astype(z.dtype)
        h = h + self.embed_condition(c)
        for block in self.blocks:
            h = block(h, e)
        return self.head(self.norm(h))
