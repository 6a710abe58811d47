"""The seven learned networks of PDE-OBS (Controlled Evaluation Across Observation Patterns), in Equinox.

Layer for layer the PDE-OBS adaptations (`src/pdeobs/methods/neural.py`,
`operator_networks.py` at commit 4610219d), so that at the published settings
the parameter counts equal the paper's Table 6 (complex weights counted as two
real scalars):

  ==================  ==========================================  ==========
  network             published setting                           parameters
  ==================  ==========================================  ==========
  `UFNO2d`            width 36, 12 modes, padding 8               5,049,545
  `CompactFNO2d`      width 32, 12 modes, 4 layers                2,366,145
  `CompactCNO2d`      width 32                                    103,617
  `SpatialDeepONet`   hidden 128, latent 128, CNN width 64, 4 x 4 221,121
  `MaskGNOT`          hidden 128, 3 layers, 1 head, 2 experts     2,099,975
  `MaskTransolver`    hidden 128, 8 layers, 8 heads, 64 slices    2,811,457
  PINO                `CompactFNO2d` width 64, 20 modes, 5 layers 32,798,273
  ==================  ==========================================  ==========

(PINO's count is not printed in the paper; it is the PDE-OBS backbone's.)

Every network maps `(C_in, H, W) -> (C_out, H, W)` with `__call__(x, t=None, *,
key=None)` (no noise conditioning: `t` must be None). `x` holds the observed
values and the observation mask (C_in = values + 1); like PDE-OBS, each network
appends coordinate channels on [0, 1] (CNO: [-1, 1]) and `geometry_channels`
obstacle-indicator channels, which are zero on the obstacle-free domains of the
transfer experiment (PDE-OBS feeds one; it changes the count, not the function).

Differences from the PyTorch originals, beside initialization:
  * U-FNO's U-branches use per-record group normalization with one group per
    channel where PDE-OBS uses BatchNorm (same two affine vectors, so the same
    count): the networks here are per-record functions, vmapped in training;
  * spectral layers are `posteriorjax.nn.SpectralConv` (unnormalized FFT
    pair, so the weights act on Fourier coefficients of the underlying function)
    where PDE-OBS uses the orthonormal pair; the same (2, C_out, C_in, m, m)
    complex weights;
  * the DeepONet branch pools with PyTorch's adaptive average-pool bins.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks
from posteriorjax.nn.layers import SpectralConv

# ----------------------------------------------------------------------------
# Shared pieces


def _features(x: jax.Array, geometry_channels: int, lo: float = 0.0) -> jax.Array:
    """`x (C, H, W)` followed by coordinates (y, x) on [lo, 1] (linspace) and zero geometry channels."""
    h, w = x.shape[-2:]
    gy, gx = jnp.meshgrid(
        jnp.linspace(lo, 1.0, h, dtype=x.dtype), jnp.linspace(lo, 1.0, w, dtype=x.dtype), indexing="ij"
    )
    geometry = jnp.zeros((geometry_channels, h, w), x.dtype)
    return jnp.concatenate([x, gy[None], gx[None], geometry])


def _check(x: jax.Array, t, channels: int, name: str) -> None:
    if t is not None:
        raise ValueError(f"t: {name} takes no noise level, got {t!r}")
    if x.ndim != 3 or x.shape[0] != channels:
        raise ValueError(f"x: {name} expected ({channels}, H, W), got shape {x.shape}")


def _conv(cin, cout, k, key, *, padding=None, stride=1, bias=True):
    return eqx.nn.Conv2d(
        cin, cout, k, stride=stride, padding=k // 2 if padding is None else padding, use_bias=bias, key=key
    )


class _Linear(eqx.Module):
    """Linear map over the last axis of `(..., d_in)`."""

    layer: eqx.nn.Linear

    def __init__(self, d_in, d_out, key, *, bias=True):
        self.layer = eqx.nn.Linear(d_in, d_out, use_bias=bias, key=key)

    def __call__(self, z):
        out = z @ self.layer.weight.T
        return out if self.layer.bias is None else out + self.layer.bias


class _MLP(eqx.Module):
    """Linear layers of `widths`, `activation` between them (PDE-OBS `_mlp`)."""

    layers: tuple[_Linear, ...]
    activation: str = eqx.field(static=True)

    def __init__(self, widths, activation, key):
        keys = jr.split(key, len(widths) - 1)
        self.layers = tuple(_Linear(a, b, k) for a, b, k in zip(widths[:-1], widths[1:], keys, strict=True))
        self.activation = activation

    def __call__(self, z):
        act = jax.nn.relu if self.activation == "relu" else jax.nn.gelu
        for i, layer in enumerate(self.layers):
            z = layer(z)
            if i < len(self.layers) - 1:
                z = act(z)
        return z


def _groups(channels: int) -> int:
    g = min(8, channels)
    while channels % g:
        g -= 1
    return g


class _ConvBlock(eqx.Module):
    """conv3 - GroupNorm - GELU - conv3 - GroupNorm - GELU (PDE-OBS `_ConvBlock`)."""

    c1: eqx.nn.Conv2d
    n1: eqx.nn.GroupNorm
    c2: eqx.nn.Conv2d
    n2: eqx.nn.GroupNorm

    def __init__(self, cin, cout, key):
        k1, k2 = jr.split(key)
        self.c1, self.c2 = _conv(cin, cout, 3, k1), _conv(cout, cout, 3, k2)
        self.n1 = eqx.nn.GroupNorm(_groups(cout), cout)
        self.n2 = eqx.nn.GroupNorm(_groups(cout), cout)

    def __call__(self, x):
        x = jax.nn.gelu(self.n1(self.c1(x)), approximate=False)
        return jax.nn.gelu(self.n2(self.c2(x)), approximate=False)


def _resize_bilinear(x, size):
    return jax.image.resize(x, (x.shape[0], *size), "bilinear")


# ----------------------------------------------------------------------------
# FNO and U-FNO


class CompactFNO2d(eqx.Module):
    """PDE-OBS compact FNO: lift, `layers` x gelu(GroupNorm(K v + W v)), two-layer GELU projection."""

    lift: eqx.nn.Conv2d
    spectral: tuple[SpectralConv, ...]
    local: tuple[eqx.nn.Conv2d, ...]
    norm: tuple[eqx.nn.GroupNorm, ...]
    p1: eqx.nn.Conv2d
    p2: eqx.nn.Conv2d
    in_channels: int = eqx.field(static=True)
    geometry_channels: int = eqx.field(static=True)

    def __init__(self, in_channels, out_channels, *, width=32, modes=12, layers=4, geometry_channels=1, key):
        checks.positive_ints(width=width, modes=modes, layers=layers)
        keys = jr.split(key, 2 * layers + 3)
        self.in_channels, self.geometry_channels = in_channels, geometry_channels
        self.lift = _conv(in_channels + 2 + geometry_channels, width, 1, keys[0])
        self.spectral = tuple(
            SpectralConv(width, width, (modes, modes), key=keys[1 + i]) for i in range(layers)
        )
        self.local = tuple(_conv(width, width, 1, keys[1 + layers + i]) for i in range(layers))
        self.norm = tuple(eqx.nn.GroupNorm(min(8, width), width) for _ in range(layers))
        self.p1 = _conv(width, 2 * width, 1, keys[-2])
        self.p2 = _conv(2 * width, out_channels, 1, keys[-1])

    def __call__(self, x, t=None, *, key=None):
        _check(x, t, self.in_channels, "CompactFNO2d")
        v = self.lift(_features(x, self.geometry_channels))
        for spectral, local, norm in zip(self.spectral, self.local, self.norm, strict=True):
            v = jax.nn.gelu(norm(spectral(v) + local(v)), approximate=False)
        return self.p2(jax.nn.gelu(self.p1(v), approximate=False))


class _UBranch(eqx.Module):
    """Three-scale U-shaped local branch of a U-Fourier block (constant width)."""

    downs: tuple[tuple[eqx.nn.Conv2d, eqx.nn.GroupNorm], ...]
    up2: eqx.nn.ConvTranspose2d
    up1: eqx.nn.ConvTranspose2d
    up0: eqx.nn.ConvTranspose2d
    out: eqx.nn.Conv2d

    def __init__(self, c, key):
        keys = jr.split(key, 9)
        strides = (2, 2, 1, 2, 1)  # down_1; down_2 = (2, 1); down_3 = (2, 1)
        self.downs = tuple(
            (_conv(c, c, 3, keys[i], stride=s, bias=False), eqx.nn.GroupNorm(c, c))
            for i, s in enumerate(strides)
        )
        self.up2 = eqx.nn.ConvTranspose2d(c, c, 4, stride=2, padding=1, key=keys[5])
        self.up1 = eqx.nn.ConvTranspose2d(2 * c, c, 4, stride=2, padding=1, key=keys[6])
        self.up0 = eqx.nn.ConvTranspose2d(2 * c, c, 4, stride=2, padding=1, key=keys[7])
        self.out = _conv(2 * c, c, 3, keys[8])

    def __call__(self, v):
        def down(i, z):
            conv, norm = self.downs[i]
            return jax.nn.leaky_relu(norm(conv(z)), 0.1)

        l1 = down(0, v)
        l2 = down(2, down(1, l1))
        l3 = down(4, down(3, l2))

        def up(layer, z, like):
            z = jax.nn.leaky_relu(layer(z), 0.1)
            return z if z.shape[-2:] == like.shape[-2:] else _resize_bilinear(z, like.shape[-2:])

        u2 = up(self.up2, l3, l2)
        u1 = up(self.up1, jnp.concatenate([l2, u2]), l1)
        u0 = up(self.up0, jnp.concatenate([l1, u1]), v)
        return self.out(jnp.concatenate([v, u0]))


class UFNO2d(eqx.Module):
    """PDE-OBS U-FNO-2D: six Fourier blocks, U-branches added on blocks 4-6, `padding` cells of zeros.

    v_{l+1} = relu(K_l v_l + W_l v_l [+ U_l(v_l) for l >= 3]) on the lifted field
    zero-padded by `padding` cells on the high side of each axis (cropped before
    the projection conv1 -> relu -> conv1 with 128 hidden channels).
    """

    lift: eqx.nn.Conv2d
    spectral: tuple[SpectralConv, ...]
    local: tuple[eqx.nn.Conv2d, ...]
    branches: tuple[_UBranch, ...]
    p1: eqx.nn.Conv2d
    p2: eqx.nn.Conv2d
    in_channels: int = eqx.field(static=True)
    geometry_channels: int = eqx.field(static=True)
    padding: int = eqx.field(static=True)

    def __init__(self, in_channels, out_channels, *, width=36, modes=12, padding=8, geometry_channels=1, key):
        if min(width, modes) < 1 or padding < 0:
            raise ValueError(
                f"width, modes, padding: expected > 0, > 0, >= 0, got {width}, {modes}, {padding}"
            )
        keys = jr.split(key, 17)
        self.in_channels, self.geometry_channels, self.padding = in_channels, geometry_channels, int(padding)
        self.lift = _conv(in_channels + 2 + geometry_channels, width, 1, keys[0])
        self.spectral = tuple(SpectralConv(width, width, (modes, modes), key=keys[1 + i]) for i in range(6))
        self.local = tuple(_conv(width, width, 1, keys[7 + i]) for i in range(6))
        self.branches = tuple(_UBranch(width, keys[13 + i]) for i in range(3))
        self.p1 = _conv(width, 128, 1, keys[16])
        self.p2 = _conv(128, out_channels, 1, jr.fold_in(keys[16], 1))

    def __call__(self, x, t=None, *, key=None):
        _check(x, t, self.in_channels, "UFNO2d")
        h, w = x.shape[-2:]
        v = self.lift(_features(x, self.geometry_channels))
        v = jnp.pad(v, ((0, 0), (0, self.padding), (0, self.padding)))
        for i, (spectral, local) in enumerate(zip(self.spectral, self.local, strict=True)):
            update = spectral(v) + local(v)
            if i >= 3:
                update = update + self.branches[i - 3](v)
            v = jax.nn.relu(update)
        return self.p2(jax.nn.relu(self.p1(v[:, :h, :w])))


# ----------------------------------------------------------------------------
# CNO-inspired CNN


class CompactCNO2d(eqx.Module):
    """PDE-OBS anti-aliased CNO-inspired CNN: binomial low-pass before each conv block, one 2x level."""

    enc: _ConvBlock
    mid: _ConvBlock
    dec: _ConvBlock
    head: eqx.nn.Conv2d
    in_channels: int = eqx.field(static=True)
    geometry_channels: int = eqx.field(static=True)

    def __init__(self, in_channels, out_channels, *, width=32, geometry_channels=1, key):
        k = jr.split(key, 4)
        self.in_channels, self.geometry_channels = in_channels, geometry_channels
        self.enc = _ConvBlock(in_channels + 2 + geometry_channels, width, k[0])
        self.mid = _ConvBlock(width, 2 * width, k[1])
        self.dec = _ConvBlock(3 * width, width, k[2])
        self.head = _conv(width, out_channels, 1, k[3])

    @staticmethod
    def _lowpass(x):
        kernel = jnp.outer(jnp.array([1.0, 2.0, 1.0]), jnp.array([1.0, 2.0, 1.0])).astype(x.dtype) / 16.0
        padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1)), mode="edge")
        h, w = x.shape[-2:]
        return sum(kernel[i, j] * padded[:, i : i + h, j : j + w] for i in range(3) for j in range(3))

    def __call__(self, x, t=None, *, key=None):
        _check(x, t, self.in_channels, "CompactCNO2d")
        encoded = self.enc(self._lowpass(_features(x, self.geometry_channels, lo=-1.0)))
        c, h, w = encoded.shape
        hh, ww = -(-h // 2), -(-w // 2)
        padded = jnp.pad(encoded, ((0, 0), (0, 2 * hh - h), (0, 2 * ww - w)))
        counts = jnp.pad(jnp.ones((1, h, w), x.dtype), ((0, 0), (0, 2 * hh - h), (0, 2 * ww - w)))
        pool = lambda z: z.reshape(z.shape[0], hh, 2, ww, 2).sum((2, 4))  # noqa: E731
        low = pool(padded) / pool(counts)  # ceil-mode average pooling
        middle = self.mid(self._lowpass(low))
        up = jax.image.resize(middle, (middle.shape[0], h, w), "bilinear", antialias=True)
        return self.head(self.dec(self._lowpass(jnp.concatenate([up, encoded]))))


# ----------------------------------------------------------------------------
# DeepONet with the spatial-CNN branch


def _adaptive_avg_pool(x, size: int):
    """PyTorch adaptive average pooling `(C, H, W) -> (C, size, size)`: bins floor(i n/s):ceil((i+1) n/s)."""

    def bins(n):
        return [(math.floor(i * n / size), math.ceil((i + 1) * n / size)) for i in range(size)]

    rows = [jnp.mean(x[:, a:b], axis=1) for a, b in bins(x.shape[1])]  # (C, W) each
    return jnp.stack(
        [jnp.stack([jnp.mean(r[:, a:b], axis=1) for a, b in bins(x.shape[2])], -1) for r in rows], 1
    )


class SpatialDeepONet(eqx.Module):
    """PDE-OBS DeepONet: CNN branch pooled to `grid` x `grid`, MLP fusion, coordinate trunk, inner product."""

    convs: tuple[eqx.nn.Conv2d, ...]
    fusion: _MLP
    trunk: _MLP
    bias: jax.Array
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    latent: int = eqx.field(static=True)
    grid: int = eqx.field(static=True)
    geometry_channels: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels,
        out_channels,
        *,
        hidden=128,
        latent=128,
        branch_width=64,
        branch_layers=2,
        trunk_layers=2,
        grid=4,
        geometry_channels=1,
        key,
    ):
        checks.positive_ints(hidden=hidden, latent=latent, branch_width=branch_width)
        checks.positive_ints(branch_layers=branch_layers, trunk_layers=trunk_layers, grid=grid)
        keys = jr.split(key, branch_layers + 2)
        self.in_channels, self.out_channels, self.latent = in_channels, out_channels, latent
        self.grid, self.geometry_channels = grid, geometry_channels
        cin = in_channels + 2 + geometry_channels
        self.convs = tuple(
            _conv(cin if i == 0 else branch_width, branch_width, 3, keys[i]) for i in range(branch_layers)
        )
        self.fusion = _MLP([branch_width * grid * grid, hidden, out_channels * latent], "gelu", keys[-2])
        self.trunk = _MLP(
            [2 + geometry_channels, *([hidden] * trunk_layers), out_channels * latent], "relu", keys[-1]
        )
        self.bias = jnp.zeros((out_channels,))

    def __call__(self, x, t=None, *, key=None):
        _check(x, t, self.in_channels, "SpatialDeepONet")
        h, w = x.shape[-2:]
        sensors = _features(x, self.geometry_channels)
        z = sensors
        for conv in self.convs:
            z = jax.nn.gelu(conv(z), approximate=False)
        branch = self.fusion(_adaptive_avg_pool(z, self.grid).reshape(-1)).reshape(
            self.out_channels, self.latent
        )
        query = sensors[self.in_channels :].reshape(sensors.shape[0] - self.in_channels, -1).T  # (HW, 2 + G)
        trunk = self.trunk(query).reshape(h * w, self.out_channels, self.latent)
        out = jnp.einsum("ol,nol->on", branch, trunk) + self.bias[:, None]
        return out.reshape(self.out_channels, h, w)


# ----------------------------------------------------------------------------
# Transolver


class _SliceAttention(eqx.Module):
    feature: eqx.nn.Conv2d
    selector: eqx.nn.Conv2d
    slice: _Linear
    q: _Linear
    k: _Linear
    v: _Linear
    out: _Linear
    temperature: jax.Array
    heads: int = eqx.field(static=True)

    def __init__(self, hidden, heads, slices, key):
        if hidden % heads:
            raise ValueError(f"hidden: expected a multiple of heads {heads}, got {hidden}")
        k = jr.split(key, 7)
        d = hidden // heads
        self.heads = heads
        self.feature, self.selector = _conv(hidden, hidden, 3, k[0]), _conv(hidden, hidden, 3, k[1])
        self.slice = _Linear(d, slices, k[2])
        orth = jax.nn.initializers.orthogonal()(k[6], (slices, d))
        self.slice = eqx.tree_at(lambda s: s.layer.weight, self.slice, orth)
        self.q, self.k, self.v = (_Linear(d, d, kk, bias=False) for kk in k[3:6])
        self.out = _Linear(hidden, hidden, jr.fold_in(key, 7))
        self.temperature = jnp.full((heads, 1, 1), 0.5)

    def __call__(self, s):
        c, h, w = s.shape
        d = c // self.heads
        feats = self.feature(s).reshape(self.heads, d, h * w).transpose(0, 2, 1)  # (heads, N, d)
        sel = self.selector(s).reshape(self.heads, d, h * w).transpose(0, 2, 1)
        weights = jax.nn.softmax(
            self.slice(sel) / jnp.clip(self.temperature, 0.1, 5.0), axis=-1
        )  # (heads, N, S)
        mass = jnp.maximum(weights.sum(axis=1), 1e-5)  # (heads, S)
        tokens = jnp.einsum("hnd,hns->hsd", feats, weights) / mass[..., None]
        q, k, v = self.q(tokens), self.k(tokens), self.v(tokens)
        attn = jax.nn.softmax(q @ k.transpose(0, 2, 1) * d**-0.5, axis=-1)
        restored = jnp.einsum("hsd,hns->hnd", attn @ v, weights).transpose(1, 0, 2).reshape(h * w, c)
        return self.out(restored).T.reshape(c, h, w)


class MaskTransolver(eqx.Module):
    """PDE-OBS structured-grid Transolver: lift (2 x hidden, GELU), `layers` physics-slice blocks, head."""

    lift1: eqx.nn.Conv2d
    lift2: eqx.nn.Conv2d
    blocks: tuple[tuple, ...]
    norm: eqx.nn.GroupNorm
    project: eqx.nn.Conv2d
    in_channels: int = eqx.field(static=True)
    geometry_channels: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels,
        out_channels,
        *,
        hidden=128,
        layers=8,
        heads=8,
        slices=64,
        mlp_ratio=1,
        geometry_channels=1,
        key,
    ):
        checks.positive_ints(hidden=hidden, layers=layers, heads=heads, slices=slices, mlp_ratio=mlp_ratio)
        keys = jr.split(key, layers + 3)
        self.in_channels, self.geometry_channels = in_channels, geometry_channels
        self.lift1 = _conv(in_channels + 2 + geometry_channels, 2 * hidden, 1, keys[0])
        self.lift2 = _conv(2 * hidden, hidden, 1, keys[1])

        def block(k):
            k1, k2, k3 = jr.split(k, 3)
            return (
                eqx.nn.GroupNorm(1, hidden),
                _SliceAttention(hidden, heads, slices, k1),
                eqx.nn.GroupNorm(1, hidden),
                _conv(hidden, hidden * mlp_ratio, 1, k2),
                _conv(hidden * mlp_ratio, hidden, 1, k3),
            )

        self.blocks = tuple(block(keys[2 + i]) for i in range(layers))
        self.norm = eqx.nn.GroupNorm(1, hidden)
        self.project = _conv(hidden, out_channels, 1, keys[-1])

    def __call__(self, x, t=None, *, key=None):
        _check(x, t, self.in_channels, "MaskTransolver")
        s = self.lift2(jax.nn.gelu(self.lift1(_features(x, self.geometry_channels)), approximate=False))
        for n1, attention, n2, m1, m2 in self.blocks:
            s = s + attention(n1(s))
            s = s + m2(jax.nn.gelu(m1(n2(s)), approximate=False))
        return self.project(self.norm(s))


# ----------------------------------------------------------------------------
# GNOT


class _LinearAttention(eqx.Module):
    """Normalized linear attention (softmax over the head dimension of q and k), masked sources."""

    q: _Linear
    k: _Linear
    v: _Linear
    o: _Linear
    heads: int = eqx.field(static=True)

    def __init__(self, hidden, heads, key):
        if hidden % heads:
            raise ValueError(f"hidden: expected a multiple of heads {heads}, got {hidden}")
        k = jr.split(key, 4)
        self.q, self.k, self.v, self.o = (_Linear(hidden, hidden, kk) for kk in k)
        self.heads = heads

    def __call__(self, query, source=None, mask=None):
        source = query if source is None else source
        n, c = query.shape
        d = c // self.heads

        def split(z):
            return z.reshape(z.shape[0], self.heads, d).transpose(1, 0, 2)

        q = jax.nn.softmax(split(self.q(query)), axis=-1)
        k = jax.nn.softmax(split(self.k(source)), axis=-1)
        v = split(self.v(source))
        if mask is not None:
            k, v = k * mask[None, :, None], v * mask[None, :, None]
        denom = jnp.maximum((q * k.sum(axis=1, keepdims=True)).sum(-1, keepdims=True), 1e-6)
        out = (q @ (k.transpose(0, 2, 1) @ v)) / denom
        return self.o(out.transpose(1, 0, 2).reshape(n, c))


class _GNOTBlock(eqx.Module):
    norms: tuple[eqx.nn.LayerNorm, ...]
    cross: _LinearAttention
    self_attention: _LinearAttention
    experts1: tuple[_MLP, ...]
    experts2: tuple[_MLP, ...]
    gate: _MLP

    def __init__(self, hidden, heads, experts, inner_ratio, gate_features, key):
        k = jr.split(key, 3 + 2 * experts)
        self.norms = tuple(
            eqx.nn.LayerNorm(hidden) for _ in range(5)
        )  # cross q, cross source, self, expert 1, 2
        self.cross = _LinearAttention(hidden, heads, k[0])
        self.self_attention = _LinearAttention(hidden, heads, k[1])
        inner = inner_ratio * hidden
        self.experts1 = tuple(_MLP([hidden, inner, hidden], "gelu", k[3 + i]) for i in range(experts))
        self.experts2 = tuple(
            _MLP([hidden, inner, hidden], "gelu", k[3 + experts + i]) for i in range(experts)
        )
        self.gate = _MLP([gate_features, hidden, experts], "gelu", k[2])

    def _mixture(self, state, gates, experts):
        weights = jax.nn.softmax(self.gate(gates), axis=-1)  # (N, E)
        return sum(weights[:, i : i + 1] * e(state) for i, e in enumerate(experts))

    def __call__(self, state, source, mask, gates):
        ln = lambda i, z: jax.vmap(self.norms[i])(z)  # noqa: E731
        state = state + self.cross(ln(0, state), ln(1, source), mask)
        state = state + ln(3, self._mixture(state, gates, self.experts1))
        state = state + self.self_attention(ln(2, state))
        return state + ln(4, self._mixture(state, gates, self.experts2))


class MaskGNOT(eqx.Module):
    """PDE-OBS GNOT: source and query MLP encoders, cross/self linear attention with gated experts."""

    source: _MLP
    query: _MLP
    blocks: tuple[_GNOTBlock, ...]
    head: _MLP
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    geometry_channels: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels,
        out_channels,
        *,
        hidden=128,
        layers=3,
        heads=1,
        experts=2,
        inner_ratio=4,
        mlp_layers=3,
        geometry_channels=1,
        key,
    ):
        checks.positive_ints(hidden=hidden, layers=layers, heads=heads, experts=experts)
        checks.positive_ints(inner_ratio=inner_ratio, mlp_layers=mlp_layers)
        keys = jr.split(key, layers + 3)
        self.in_channels, self.out_channels, self.geometry_channels = (
            in_channels,
            out_channels,
            geometry_channels,
        )
        gates = 2 + geometry_channels
        self.source = _MLP([in_channels + gates, *([hidden] * mlp_layers), hidden], "gelu", keys[0])
        self.query = _MLP([gates, *([hidden] * mlp_layers), hidden], "gelu", keys[1])
        self.blocks = tuple(
            _GNOTBlock(hidden, heads, experts, inner_ratio, gates, keys[3 + i]) for i in range(layers)
        )
        self.head = _MLP([hidden, hidden, out_channels], "gelu", keys[2])

    def __call__(self, x, t=None, *, key=None):
        _check(x, t, self.in_channels, "MaskGNOT")
        h, w = x.shape[-2:]
        feats = _features(x, self.geometry_channels).reshape(x.shape[0] + 2 + self.geometry_channels, -1).T
        gates = feats[:, self.in_channels :]
        mask = x[-1].reshape(-1)
        source, state = self.source(feats), self.query(gates)
        for block in self.blocks:
            state = block(state, source, mask, gates)
        return self.head(state).T.reshape(self.out_channels, h, w)


MODELS = {
    "pdeobs_ufno": UFNO2d,
    "pdeobs_fno": CompactFNO2d,
    "pdeobs_cno": CompactCNO2d,
    "pdeobs_deeponet": SpatialDeepONet,
    "pdeobs_gnot": MaskGNOT,
    "pdeobs_transolver": MaskTransolver,
}


def parameter_count(model) -> int:
    """Real scalars in the inexact arrays of `model` (complex: two), also for `eqx.filter_eval_shape`."""
    leaves = [leaf for leaf in jax.tree.leaves(model) if hasattr(leaf, "shape") and hasattr(leaf, "dtype")]
    return sum(
        math.prod(leaf.shape) * (2 if jnp.issubdtype(leaf.dtype, jnp.complexfloating) else 1)
        for leaf in leaves
        if jnp.issubdtype(leaf.dtype, jnp.inexact)
    )
