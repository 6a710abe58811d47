"""Transformer operators on grid points as tokens: Transolver (Wu et al. 2024) and GNOT (Hao et al. 2023).

A field `(C_in, H, W)` becomes N = H W tokens, each the input channels at a grid point
together with the point's coordinates (y, x) = ((i + 1/2) / H, (j + 1/2) / W); an MLP lifts
them to `hidden` features, `layers` pre-norm transformer blocks follow and a linear head
gives `C_out` values per token. Every operation is either per token or a normalized sum
over tokens, so `apply_tokens` is permutation-equivariant: permuting the tokens (with their
coordinates) permutes the outputs. Cost is linear in N.

Transolver block: z <- z + PhysicsAttention(LN z); z <- z + MLP(LN z). Physics-attention
(Transolver Eqs. 3-6), per head: slice weights w = softmax_g(W_s x_i / tau) over G learned
slices; slice tokens s_g = sum_i w_ig f_i / sum_i w_ig; softmax self-attention among the G
slice tokens; each point gathers the attended slice tokens back, sum_g w_ig s'_g.

GNOT block (single input function, so the cross-attention is over the same tokens):
z <- z + NormAttention(LN z); z <- z + sum_e g_e(p) FFN_e(LN z), with the heterogeneous
normalized (linear) attention a_i = sum_j (q~_i . k~_j) v_j / sum_j (q~_i . k~_j),
q~, k~ softmax-normalized over each head's features, and the geometric gate
g(p) = softmax(MLP(p)) over `experts` feed-forward experts selected by position p.

With `embed_dim` > 0 a FiLM bias of the noise embedding is added to the tokens before every
block (diffusion backbone).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks
from posteriorjax.nn.embeddings import NoiseEmbedding
from posteriorjax.nn.layers import check_channels


def grid_tokens(x: jax.Array) -> jax.Array:
    """Field `(C, H, W)` -> tokens `(H W, C + 2)`: channel values then cell-centre coordinates (y, x)."""
    c, h, w = x.shape
    y = (jnp.arange(h, dtype=x.dtype) + 0.5) / h
    xx = (jnp.arange(w, dtype=x.dtype) + 0.5) / w
    yy, xx = jnp.meshgrid(y, xx, indexing="ij")
    return jnp.concatenate([x.reshape(c, -1), yy.reshape(1, -1), xx.reshape(1, -1)]).T


def _mlp(sizes, key):
    keys = jr.split(key, len(sizes) - 1)
    return tuple(eqx.nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys, strict=True))


def _apply_mlp(layers, z):
    for i, layer in enumerate(layers):
        z = layer(z)
        if i < len(layers) - 1:
            z = jax.nn.gelu(z)
    return z


def _per_token(fn, z):
    return jax.vmap(fn)(z)


class PhysicsAttention(eqx.Module):
    """Transolver physics-attention on tokens `(N, hidden) -> (N, hidden)`."""

    to_x: eqx.nn.Linear
    to_f: eqx.nn.Linear
    to_slice: eqx.nn.Linear
    log_temperature: jax.Array
    q: eqx.nn.Linear
    k: eqx.nn.Linear
    v: eqx.nn.Linear
    out: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, hidden: int, heads: int, slices: int, *, key):
        if hidden % heads:
            raise ValueError(f"heads: expected a divisor of hidden={hidden}, got {heads}")
        d = hidden // heads
        ks = jr.split(key, 7)
        self.to_x = eqx.nn.Linear(hidden, hidden, key=ks[0])
        self.to_f = eqx.nn.Linear(hidden, hidden, key=ks[1])
        self.to_slice = eqx.nn.Linear(d, slices, key=ks[2])
        self.log_temperature = jnp.full((heads,), jnp.log(0.5))
        self.q = eqx.nn.Linear(d, d, use_bias=False, key=ks[3])
        self.k = eqx.nn.Linear(d, d, use_bias=False, key=ks[4])
        self.v = eqx.nn.Linear(d, d, use_bias=False, key=ks[5])
        self.out = eqx.nn.Linear(hidden, hidden, key=ks[6])
        self.heads = heads

    def __call__(self, z: jax.Array) -> jax.Array:
        n, hidden = z.shape
        d = hidden // self.heads
        xm = _per_token(self.to_x, z).reshape(n, self.heads, d)
        fm = _per_token(self.to_f, z).reshape(n, self.heads, d)
        logits = jax.vmap(jax.vmap(self.to_slice))(xm) / jnp.exp(self.log_temperature)[None, :, None]
        w = jax.nn.softmax(logits, axis=-1)  # (N, heads, G)
        tokens = jnp.einsum("nhg,nhd->hgd", w, fm) / (w.sum(0)[..., None] + 1e-5)
        q, k, v = (jax.vmap(jax.vmap(lin))(tokens) for lin in (self.q, self.k, self.v))
        attn = jax.nn.softmax(jnp.einsum("hgd,hkd->hgk", q, k) / d**0.5, axis=-1)
        tokens = jnp.einsum("hgk,hkd->hgd", attn, v)
        return _per_token(self.out, jnp.einsum("nhg,hgd->nhd", w, tokens).reshape(n, hidden))


class NormalizedAttention(eqx.Module):
    """GNOT heterogeneous normalized linear attention on tokens `(N, hidden) -> (N, hidden)`."""

    q: eqx.nn.Linear
    k: eqx.nn.Linear
    v: eqx.nn.Linear
    out: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, hidden: int, heads: int, *, key):
        if hidden % heads:
            raise ValueError(f"heads: expected a divisor of hidden={hidden}, got {heads}")
        ks = jr.split(key, 4)
        self.q, self.k, self.v, self.out = (eqx.nn.Linear(hidden, hidden, key=k) for k in ks)
        self.heads = heads

    def __call__(self, z: jax.Array) -> jax.Array:
        n, hidden = z.shape
        split = lambda a: a.reshape(n, self.heads, hidden // self.heads)  # noqa: E731
        q = jax.nn.softmax(split(_per_token(self.q, z)), axis=-1)
        k = jax.nn.softmax(split(_per_token(self.k, z)), axis=-1)
        v = split(_per_token(self.v, z))
        kv = jnp.einsum("nhd,nhe->hde", k, v)
        norm = jnp.einsum("nhd,hd->nh", q, k.sum(0))
        a = jnp.einsum("nhd,hde->nhe", q, kv) / norm[..., None]
        return _per_token(self.out, a.reshape(n, hidden))


class _TransolverBlock(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attn: PhysicsAttention
    norm2: eqx.nn.LayerNorm
    mlp: tuple[eqx.nn.Linear, ...]

    def __init__(self, hidden, heads, slices, mlp_ratio, *, key):
        k1, k2 = jr.split(key)
        self.norm1, self.norm2 = eqx.nn.LayerNorm(hidden), eqx.nn.LayerNorm(hidden)
        self.attn = PhysicsAttention(hidden, heads, slices, key=k1)
        self.mlp = _mlp((hidden, mlp_ratio * hidden, hidden), k2)

    def __call__(self, z):
        z = z + self.attn(_per_token(self.norm1, z))
        return z + _per_token(lambda t: _apply_mlp(self.mlp, self.norm2(t)), z)


class _GNOTBlock(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attn: NormalizedAttention
    norm2: eqx.nn.LayerNorm
    experts: tuple[tuple[eqx.nn.Linear, ...], ...]
    gate: tuple[eqx.nn.Linear, ...]

    def __init__(self, hidden, heads, experts, mlp_ratio, *, key):
        k1, k2, k3 = jr.split(key, 3)
        self.norm1, self.norm2 = eqx.nn.LayerNorm(hidden), eqx.nn.LayerNorm(hidden)
        self.attn = NormalizedAttention(hidden, heads, key=k1)
        self.experts = tuple(_mlp((hidden, mlp_ratio * hidden, hidden), k) for k in jr.split(k2, experts))
        self.gate = _mlp((2, hidden, experts), k3)

    def __call__(self, z, pos):
        z = z + self.attn(_per_token(self.norm1, z))
        g = jax.nn.softmax(_per_token(lambda p: _apply_mlp(self.gate, p), pos), axis=-1)  # (N, E)

        def ffn(t):
            t = self.norm2(t)
            return jnp.stack([_apply_mlp(e, t) for e in self.experts], axis=-1)  # (hidden, E)

        return z + jnp.einsum("nce,ne->nc", _per_token(ffn, z), g)


class _TokenOperator(eqx.Module):
    """Shared shell: token lifting, noise FiLM, blocks, head; subclasses set `blocks`."""

    lift: tuple[eqx.nn.Linear, ...]
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear
    embed: NoiseEmbedding | None
    films: tuple[eqx.nn.Linear, ...] | None
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)

    def _setup(self, in_channels, out_channels, hidden, layers, embed_dim, key):
        k1, k2, k3, k4 = jr.split(key, 4)
        self.lift = _mlp((in_channels + 2, 2 * hidden, hidden), k1)
        self.norm = eqx.nn.LayerNorm(hidden)
        self.head = eqx.nn.Linear(hidden, out_channels, key=k2)
        self.embed = NoiseEmbedding(embed_dim, key=k3) if embed_dim else None
        films = (eqx.nn.Linear(embed_dim, hidden, key=k) for k in jr.split(k4, layers))
        self.films = tuple(films) if embed_dim else None
        self.in_channels, self.out_channels = in_channels, out_channels

    @abc.abstractmethod
    def _block(self, block, z, pos):
        """Apply one block to tokens `z (N, hidden)` at positions `pos (N, 2)`."""

    def apply_tokens(self, tokens: jax.Array, t: jax.Array | None = None) -> jax.Array:
        """Tokens `(N, C_in + 2)` (values, then coordinates) -> `(N, C_out)`."""
        if tokens.ndim != 2 or tokens.shape[1] != self.in_channels + 2:
            raise ValueError(f"tokens: expected (N, {self.in_channels + 2}), got shape {tokens.shape}")
        if (t is None) != (self.embed is None):
            raise ValueError(
                f"t: expected {'a noise level' if self.embed else 'None'} for this "
                f"{type(self).__name__}, got {t!r}"
            )
        emb = None if self.embed is None else jax.nn.silu(self.embed(t))
        pos = tokens[:, -2:]
        z = _per_token(lambda p: _apply_mlp(self.lift, p), tokens)
        for i, block in enumerate(self.blocks):
            if emb is not None:
                z = z + self.films[i](emb)
            z = self._block(block, z, pos)
        return _per_token(lambda v: self.head(self.norm(v)), z)

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        del key  # no stochastic layers
        check_channels(x, self.in_channels)
        h, w = x.shape[-2:]
        return self.apply_tokens(grid_tokens(x), t).T.reshape(self.out_channels, h, w)


class Transolver(_TokenOperator):
    """Transolver `(C_in, H, W) -> (C_out, H, W)`; `__call__(x, t=None, *, key=None)`.

    Attributes: hidden (token width), layers, heads, slices (G), mlp_ratio, embed_dim.
    """

    blocks: tuple[_TransolverBlock, ...]

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        hidden: int = 128,
        layers: int = 8,
        heads: int = 8,
        slices: int = 64,
        mlp_ratio: int = 1,
        embed_dim: int = 0,
        key,
    ):
        checks.positive_ints(hidden=hidden, layers=layers, heads=heads, slices=slices, mlp_ratio=mlp_ratio)
        k1, k2 = jr.split(key)
        self._setup(in_channels, out_channels, hidden, layers, embed_dim, k1)
        self.blocks = tuple(
            _TransolverBlock(hidden, heads, slices, mlp_ratio, key=k) for k in jr.split(k2, layers)
        )

    def _block(self, block, z, pos):
        return block(z)


class GNOT(_TokenOperator):
    """GNOT `(C_in, H, W) -> (C_out, H, W)`; `__call__(x, t=None, *, key=None)`.

    Attributes: hidden, layers, heads, experts (geometric-gated FFN experts), mlp_ratio, embed_dim.
    """

    blocks: tuple[_GNOTBlock, ...]

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        hidden: int = 128,
        layers: int = 3,
        heads: int = 1,
        experts: int = 2,
        mlp_ratio: int = 2,
        embed_dim: int = 0,
        key,
    ):
        checks.positive_ints(hidden=hidden, layers=layers, heads=heads, experts=experts, mlp_ratio=mlp_ratio)
        k1, k2 = jr.split(key)
        self._setup(in_channels, out_channels, hidden, layers, embed_dim, k1)
        self.blocks = tuple(
            _GNOTBlock(hidden, heads, experts, mlp_ratio, key=k) for k in jr.split(k2, layers)
        )

    def _block(self, block, z, pos):
        return block(z, pos)
