"""Transformer pieces of the FunDiff networks (`nn.fae`, `nn.dit`): dense layers, attention, blocks.

Token sets are `(L, D)` arrays (one example; vmap for a batch). The layers follow the Flax
modules of the published FunDiff code (PosteriorBench `training_fundiff/models.py`):

  * `Dense`: x W + b, W `(d_in, d_out)` drawn with a named initializer (``lecun``: Flax's default
    truncated-normal LeCun, ``xavier``: Glorot uniform, ``normal``: N(0, 0.02^2), ``zeros``); b = 0.
  * `Attention`: multi-head dot-product attention (Flax `MultiHeadDotProductAttention` with
    `qkv_features = D`): Q = q Wq + bq, K = kv Wk + bk, V = kv Wv + bv split into `num_heads`
    heads of size D / num_heads, softmax(Q K^T / sqrt(D / num_heads)) V, then the output dense
    back to the query width.
  * `Mlp`: Dense -> GELU (tanh form, Flax's default) -> Dense (the published `MlpBlock`).
  * `CrossAttnBlock`: pre-norm cross attention, q <- q + Attn(LN q, LN kv), then
    q <- q + Mlp(LN q); with kv = q it is the published `SelfAttnBlock` (one LayerNorm shared by
    query and keys, as there).
  * `sincos_1d` / `sincos_2d`: the fixed sine-cosine position embeddings (MAE form).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

_INITS = {
    "lecun": jax.nn.initializers.lecun_normal(),
    "xavier": jax.nn.initializers.xavier_uniform(),
    "normal": jax.nn.initializers.normal(0.02),
    "zeros": jax.nn.initializers.zeros,
}


class Dense(eqx.Module):
    """`(..., d_in) -> (..., d_out)`: x W + b (see module doc for the initializers)."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, d_in: int, d_out: int, *, key, init: str = "lecun"):
        if init not in _INITS:
            raise ValueError(f"init: expected one of {sorted(_INITS)}, got {init!r}")
        self.weight = _INITS[init](key, (int(d_in), int(d_out)), jnp.float32)
        self.bias = jnp.zeros((int(d_out),), jnp.float32)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.astype(x.dtype) + self.bias.astype(x.dtype)


def layer_norm(x: jax.Array, eps: float, scale=None, bias=None) -> jax.Array:
    """LayerNorm over the last axis (Flax form: (x - mean) / sqrt(var + eps), then scale, bias)."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    if scale is not None:
        y = y * scale.astype(x.dtype)
    if bias is not None:
        y = y + bias.astype(x.dtype)
    return y


class LayerNorm(eqx.Module):
    """LayerNorm of width `dim` with a learned scale (init 1) and bias (init 0)."""

    scale: jax.Array
    bias: jax.Array
    eps: float = eqx.field(static=True)

    def __init__(self, dim: int, eps: float = 1e-5):
        self.scale = jnp.ones((int(dim),), jnp.float32)
        self.bias = jnp.zeros((int(dim),), jnp.float32)
        self.eps = float(eps)

    def __call__(self, x: jax.Array) -> jax.Array:
        return layer_norm(x, self.eps, self.scale, self.bias)


class Attention(eqx.Module):
    """Multi-head attention `(q (Lq, Dq), kv (Lk, Dk)) -> (Lq, Dq)` with `dim` qkv features."""

    query: Dense
    key: Dense
    value: Dense
    out: Dense
    num_heads: int = eqx.field(static=True)

    def __init__(self, q_dim: int, kv_dim: int, dim: int, num_heads: int, *, key, init: str = "lecun"):
        if dim % num_heads:
            raise ValueError(f"num_heads: expected a divisor of the width {dim}, got {num_heads}")
        kq, kk, kv, ko = jr.split(key, 4)
        self.query = Dense(q_dim, dim, key=kq, init=init)
        self.key = Dense(kv_dim, dim, key=kk, init=init)
        self.value = Dense(kv_dim, dim, key=kv, init=init)
        self.out = Dense(dim, q_dim, key=ko, init=init)
        self.num_heads = int(num_heads)

    def __call__(self, q: jax.Array, kv: jax.Array) -> jax.Array:
        h = self.num_heads

        def heads(x):
            return x.reshape(x.shape[0], h, x.shape[1] // h)

        qh, kh, vh = heads(self.query(q)), heads(self.key(kv)), heads(self.value(kv))
        qh = qh / jnp.sqrt(jnp.asarray(qh.shape[-1], q.dtype))
        weights = jax.nn.softmax(jnp.einsum("qhd,khd->hqk", qh, kh), axis=-1)
        return self.out(jnp.einsum("hqk,khd->qhd", weights, vh).reshape(q.shape[0], -1))


class Mlp(eqx.Module):
    """`(..., d_in) -> (..., d_out)`: Dense(hidden) -> GELU -> Dense(d_out), Glorot-uniform kernels."""

    fc1: Dense
    fc2: Dense

    def __init__(self, d_in: int, hidden: int, d_out: int, *, key):
        k1, k2 = jr.split(key)
        self.fc1 = Dense(d_in, hidden, key=k1, init="xavier")
        self.fc2 = Dense(hidden, d_out, key=k2, init="xavier")

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(jax.nn.gelu(self.fc1(x)))


class CrossAttnBlock(eqx.Module):
    """Pre-norm block `(q (Lq, D), kv (Lk, D)) -> (Lq, D)`; `kv=None`: self attention (see module doc)."""

    norm_q: LayerNorm
    norm_kv: LayerNorm | None
    attn: Attention
    norm_mlp: LayerNorm
    mlp: Mlp

    def __init__(self, dim: int, num_heads: int, mlp_ratio: int, *, key, eps: float = 1e-5, cross=True):
        ka, km = jr.split(key)
        self.norm_q = LayerNorm(dim, eps)
        self.norm_kv = LayerNorm(dim, eps) if cross else None
        self.attn = Attention(dim, dim, dim, num_heads, key=ka)
        self.norm_mlp = LayerNorm(dim, eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), dim, key=km)

    def __call__(self, q: jax.Array, kv: jax.Array | None = None) -> jax.Array:
        qn = self.norm_q(q)
        kvn = qn if self.norm_kv is None else self.norm_kv(kv)
        x = q + self.attn(qn, kvn)
        return x + self.mlp(self.norm_mlp(x))


def sincos_1d(dim: int, pos: jax.Array) -> jax.Array:
    """`(N,) -> (N, dim)`: [sin(pos w), cos(pos w)] with w_k = 10000^(-k / (dim/2)), k < dim/2."""
    if dim % 2:
        raise ValueError(f"dim: sine-cosine embeddings need an even width, got {dim}")
    dtype = jnp.result_type(float)  # float32, or float64 under `jax.enable_x64`
    omega = 1.0 / 10000 ** (jnp.arange(dim // 2, dtype=dtype) / (dim / 2.0))
    out = jnp.reshape(pos, (-1,)).astype(dtype)[:, None] * omega[None]
    return jnp.concatenate([jnp.sin(out), jnp.cos(out)], axis=1)


def sincos_2d(dim: int, grid: tuple[int, int]) -> jax.Array:
    """`(gh * gw, dim)` row-major: [sincos_1d(dim/2, row), sincos_1d(dim/2, column)] per cell."""
    if dim % 2:
        raise ValueError(f"dim: 2-D sine-cosine embeddings need an even width, got {dim}")
    rows, cols = jnp.meshgrid(jnp.arange(grid[0]), jnp.arange(grid[1]), indexing="ij")
    return jnp.concatenate([sincos_1d(dim // 2, rows), sincos_1d(dim // 2, cols)], axis=1)
