"""DDPM++ (EDM's `SongUNet`, ``ddpmpp``) and its U-shaped neural-operator variant (``ddpmpp-uno``).

`SongUNet` follows `NVlabs/edm` `training/networks.py` with the ``ddpmpp`` preset of its training
script (the DiffusionPDE prior of PosteriorBench, `training_diffusionpde/networks.py`):
  * noise conditioning: positional embedding of c_noise (128 channels, max 10^4, endpoint
    frequencies, [sin, cos] after EDM's swap) -> Linear + SiLU -> Linear + SiLU (4 x 128 channels),
    added to every block before its second normalization (no adaptive scale);
  * `UNetBlock`: x -> conv3(silu(gn(x))) -> silu(gn(. + affine(emb))) -> dropout -> conv3, plus a
    1x1 skip where channels change or the grid does, times sqrt(1/2); optional single-head
    self-attention (GroupNorm, 1x1 qkv, 1x1 projection), again times sqrt(1/2);
  * encoder: a 3x3 input conv, then per level a down-sampling block (2x2 average, levels > 0) and
    `num_blocks` blocks to `model_channels * channel_mult[level]`; every output is a U-Net skip;
  * decoder: two blocks at the coarsest level (the first with attention), per level an up-sampling
    block (nearest, levels < last) and `num_blocks + 1` blocks on [x, skip]; the last block of a level
    and every encoder block at a resolution in `attn_resolutions` have attention;
  * output: GroupNorm -> SiLU -> 3x3 conv (weights initialized at 1e-5 scale).
  GroupNorm has min(32, C / 4) groups and eps 1e-6; weights are Xavier-uniform, biases zero.

`SongUNO` is FunDPS's `SongUNO` (`training_fundps/networks.py`, neuraloperator/FunDPS): the same
skeleton with every 3x3 convolution of a block replaced by a neuralop `SpectralConv` (bias
included) keeping int(res * fmult) modes per axis at nominal resolution `res = resolution >> level`,
its weight a complex Tucker tensor of relative rank `rank` (neuralop ``ComplexTucker``, ranks
chosen as tensorly's `validate_tucker_rank`) when rank < 1; the grid-changing blocks resample
spectrally (their 1x1 skips by 2x2 averaging / nearest repeat); the input is [x, grid] (grid =
linspace(0, 1, n) per axis) lifted by a 1x1 conv, the output a 1x1 conv. The kept modes are placed
on the output grid band-limitedly (as `nn.SpectralConv` does).

`resolution` is the published `img_resolution` (``nn_resolution`` for SongUNO): it fixes which
levels have attention and the spectral mode counts; inputs may be any grid divisible by
2^(levels - 1) that resolves the modes. Dropout is active only when a `key` is passed.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax.nn.layers import SPECTRAL_PATHS, Dropout, check_channels, dft_conv, mix_modes, spectral_path


def positional_embedding(t: jax.Array, dim: int, max_positions: float = 10000.0) -> jax.Array:
    """EDM `PositionalEmbedding(endpoint=True)` then the sin/cos swap: `(dim,)` [sin(t w_i), cos(t w_i)],
    w_i = max^(-i / (dim/2 - 1))."""
    half = dim // 2
    freqs = (1.0 / max_positions) ** (jnp.arange(half, dtype=jnp.float32) / (half - 1))
    arg = jnp.asarray(t, jnp.float32) * freqs
    return jnp.concatenate([jnp.sin(arg), jnp.cos(arg)])


def _xavier(key, shape, fan_in, fan_out, scale=1.0):
    return scale * math.sqrt(6.0 / (fan_in + fan_out)) * jr.uniform(key, shape, minval=-1.0, maxval=1.0)


def group_norm(channels: int) -> eqx.nn.GroupNorm:
    """EDM GroupNorm: min(32, C // 4) groups, eps 1e-6, affine."""
    if channels < 4:
        raise ValueError(f"channels: EDM GroupNorm needs >= 4 channels, got {channels}")
    return eqx.nn.GroupNorm(min(32, channels // 4), channels, eps=1e-6)


def resample(x: jax.Array, mode: str) -> jax.Array:
    """EDM's [1, 1] resampling filter: ``"down"`` 2x2 average, ``"up"`` nearest 2x repeat, ``""`` none."""
    if mode == "down":
        c, h, w = x.shape
        return x.reshape(c, h // 2, 2, w // 2, 2).mean(axis=(2, 4))
    if mode == "up":
        return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
    return x


class Linear(eqx.Module):
    """EDM `Linear` (Xavier-uniform weight, zero bias): `(C_in,) -> (C_out,)`."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, cin: int, cout: int, *, key, scale: float = 1.0):
        self.weight = _xavier(key, (cout, cin), cin, cout, scale)
        self.bias = jnp.zeros((cout,))

    def __call__(self, x):
        return self.weight @ x + self.bias


class Conv2d(eqx.Module):
    """EDM `Conv2d`: optional [1, 1] up/down resampling, then a k x k 'same' convolution `(C_in, H, W)`."""

    weight: jax.Array
    bias: jax.Array
    resample: str = eqx.field(static=True)

    def __init__(self, cin: int, cout: int, kernel: int, *, key, resample: str = "", scale: float = 1.0):
        self.weight = _xavier(key, (cout, cin, kernel, kernel), cin * kernel**2, cout * kernel**2, scale)
        self.bias = jnp.zeros((cout,))
        self.resample = resample

    def __call__(self, x):
        x = resample(x, self.resample)
        p = self.weight.shape[-1] // 2
        y = jax.lax.conv_general_dilated(x[None], self.weight.astype(x.dtype), (1, 1), [(p, p), (p, p)])
        return y[0] + self.bias[:, None, None]


def tucker_rank(shape: tuple[int, ...], rank: float) -> tuple[int, ...]:
    """tensorly `validate_tucker_rank(shape, rank)` for a fractional rank: the Tucker ranks
    round(s_i f) (>= 1) with f the root of prod(s) f^d + sum(s_i^2) f = rank prod(s)."""
    n, sq, d = float(np.prod(shape)), float(sum(s * s for s in shape)), len(shape)
    lo, hi = 0.0, max(rank, 1.0)
    for _ in range(200):  # bisection to machine precision (tensorly: brentq)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if n * mid**d + sq * mid - rank * n < 0 else (lo, mid)
    return tuple(max(int(np.round(s * lo)), 1) for s in shape)


class TuckerSpectralConv(eqx.Module):
    """neuralop ``ComplexTucker`` `SpectralConv`, `(C_in, H, W) -> (C_out, S)`.

    The complex weight W `(C_in, C_out, n1, n2 // 2 + 1)` (rows: k_y = -n1/2 ... n1/2 - 1, fftshift
    order; columns: k_x >= 0) is dense when rank >= 1, else core x_0 U_0 x_1 U_1 x_2 U_2 x_3 U_3 with
    `tucker_rank` ranks; y = irfft2(W . rfft2(x) / (H W)) on the output grid `S` + bias.
    """

    core: jax.Array  # (2, *ranks) re / im, or the dense weight (2, C_in, C_out, n1, m2)
    factors: tuple[jax.Array, ...]  # (2, s_i, r_i) each; empty when dense
    bias: jax.Array
    modes: tuple[int, int] = eqx.field(static=True)

    def __init__(self, cin: int, cout: int, n_modes: tuple[int, int], rank: float = 1.0, *, key):
        n1, n2 = (int(m) for m in n_modes)
        if n1 < 1 or n2 < 1:
            raise ValueError(f"n_modes: expected positive mode counts, got {n_modes!r}")
        shape = (cin, cout, n1, n2 // 2 + 1)
        std = math.sqrt(2.0 / (cin + cout))
        keys = jr.split(key, 6)
        if rank >= 1.0:
            self.core, self.factors = std / math.sqrt(2) * jr.normal(keys[0], (2, *shape)), ()
        else:
            ranks = tucker_rank(shape, rank)
            s = (std / math.sqrt(math.prod(ranks))) ** (1 / 5) / math.sqrt(2)  # tltorch `normal_`
            self.core = s * jr.normal(keys[0], (2, *ranks))
            self.factors = tuple(
                s * jr.normal(k, (2, n, r)) for k, n, r in zip(keys[1:5], shape, ranks, strict=True)
            )
        self.bias = std * jr.normal(keys[5], (cout,))
        self.modes = (n1, n2 // 2 + 1)

    def weight(self) -> jax.Array:
        """The complex weight `(C_in, C_out, n1, n2 // 2 + 1)`."""
        core = self.core[0] + 1j * self.core[1]
        if not self.factors:
            return core
        u = [f[0] + 1j * f[1] for f in self.factors]
        return jnp.einsum("abcd,ia,ob,yc,xd->ioyx", core, *u)

    def __call__(
        self, x: jax.Array, out_size: tuple[int, int] | None = None, *, path: str = "auto"
    ) -> jax.Array:
        """`(C_in, H, W) -> (C_out, *out_size)`; `path` is ``"fft"``, ``"matmul"`` (truncated-DFT
        products, `nn.layers.dft_conv`) or ``"auto"`` (`nn.layers.spectral_path`'s cost rule)."""
        h, w = x.shape[-2:]
        sh, sw = (h, w) if out_size is None else tuple(out_size)
        n1, m2 = self.modes
        if n1 > min(h, sh) or m2 > min(w, sw) // 2 + 1:
            raise ValueError(
                f"x: grid {(h, w)} -> {(sh, sw)} resolves fewer Fourier modes than {(n1, m2)} (rows, columns)"
            )
        if path == "auto":
            path = spectral_path((h, w), (sh, sw), (n1 / 2, m2), x.shape[0], self.bias.shape[0])
        if path == "fft":
            y = self._fft(x, (sh, sw))
        elif path == "matmul":
            y = self._matmul(x, (sh, sw))
        else:
            raise ValueError(f"path: expected one of {SPECTRAL_PATHS}, got {path!r}")
        return (y + self.bias[:, None, None]).astype(x.dtype)

    def _rows(self) -> np.ndarray:
        """The kept k_y, -n1/2 ... n1/2 - 1 (the weight's fftshift row order)."""
        n1 = self.modes[0]
        return np.arange(n1) - n1 // 2

    def _fft(self, x, out_size):
        h, w = x.shape[-2:]
        sh, sw = out_size
        ky, m2 = self._rows(), self.modes[1]
        f = jnp.fft.rfft2(x)
        z = jnp.einsum("ioyx,iyx->oyx", self.weight().astype(f.dtype), f[:, ky % h, :m2])
        out = jnp.zeros((z.shape[0], sh, sw // 2 + 1), f.dtype).at[:, ky % sh, :m2].set(z)
        return jnp.fft.irfft2(out, s=(sh, sw)) * (sh * sw) / (h * w)

    def _matmul(self, x, out_size):
        """The same operator as `_fft` by real matmuls with truncated DFT matrices."""
        wgt = self.weight()
        # (C_in, C_out, n1, m2) -> `mix_modes`' (C_out, C_in, m2, n1)
        wr, wi = (jnp.transpose(part, (1, 0, 3, 2)) for part in (jnp.real(wgt), jnp.imag(wgt)))
        rows = tuple(int(k) for k in self._rows())
        return dft_conv(x, out_size, rows, self.modes[1], lambda fr, fi: mix_modes(wr, wi, fr, fi))


class Attention(eqx.Module):
    """EDM single-head self-attention: x + proj(softmax(q^T k / sqrt(C)) v) with q, k, v = qkv(gn(x))."""

    norm: eqx.nn.GroupNorm
    qkv: Conv2d
    proj: Conv2d

    def __init__(self, channels: int, *, key):
        k1, k2 = jr.split(key)
        self.norm = group_norm(channels)
        self.qkv = Conv2d(channels, 3 * channels, 1, key=k1, scale=math.sqrt(0.2))
        self.proj = Conv2d(channels, channels, 1, key=k2, scale=1e-5)

    def __call__(self, x):
        c, h, w = x.shape
        qkv = self.qkv(self.norm(x)).reshape(c, 3, h * w)  # EDM's (C, 3, HW) channel interleaving
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        att = jax.nn.softmax(jnp.einsum("cq,ck->qk", q, k / math.sqrt(c)), axis=-1)
        return x + self.proj(jnp.einsum("qk,ck->cq", att, v).reshape(c, h, w))


class Block(eqx.Module):
    """EDM `UNetBlock` (``ddpmpp``: no adaptive scale, skip scale sqrt(1/2)); FunDPS `UNOBlock` if `modes`."""

    norm0: eqx.nn.GroupNorm
    conv0: eqx.Module
    affine: Linear
    norm1: eqx.nn.GroupNorm
    conv1: eqx.Module
    skip: Conv2d | None
    attention: Attention | None
    dropout: Dropout
    in_channels: int = eqx.field(static=True)
    resample: str = eqx.field(static=True)

    def __init__(
        self, cin, cout, emb, *, resample="", attention=False, dropout=0.0, modes=None, rank=1.0, key
    ):
        keys = jr.split(key, 5)
        self.in_channels, self.resample = cin, resample
        self.norm0, self.norm1 = group_norm(cin), group_norm(cout)
        if modes is None:
            self.conv0 = Conv2d(cin, cout, 3, key=keys[0], resample=resample)
            self.conv1 = Conv2d(cout, cout, 3, key=keys[1], scale=1e-5)
        else:
            self.conv0 = TuckerSpectralConv(cin, cout, modes, rank, key=keys[0])
            self.conv1 = TuckerSpectralConv(cout, cout, modes, rank, key=keys[1])
        self.affine = Linear(emb, cout, key=keys[2])
        changes = cout != cin or bool(resample)
        self.skip = Conv2d(cin, cout, 1, key=keys[3], resample=resample) if changes else None
        self.attention = Attention(cout, key=keys[4]) if attention else None
        self.dropout = Dropout(dropout)

    def __call__(self, x, emb, key=None):
        h = jax.nn.silu(self.norm0(x))
        if isinstance(self.conv0, TuckerSpectralConv):
            c, hh, ww = resample(x[:1], self.resample).shape  # the output grid
            h = self.conv0(h, out_size=(hh, ww))
        else:
            h = self.conv0(h)
        h = jax.nn.silu(self.norm1(h + self.affine(emb)[:, None, None]))
        h = self.conv1(self.dropout(h, key=key))
        x = (h + (x if self.skip is None else self.skip(x))) * math.sqrt(0.5)
        if self.attention is not None:
            x = self.attention(x) * math.sqrt(0.5)
        return x


class _SongNet(eqx.Module):
    """The shared skeleton of `SongUNet` and `SongUNO` (module doc)."""

    map0: Linear
    map1: Linear
    lift: Conv2d
    enc: tuple[Block, ...]
    dec: tuple[Block, ...]
    takes_skip: tuple[bool, ...] = eqx.field(static=True)
    out_norm: eqx.nn.GroupNorm
    out: Conv2d
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    noise_channels: int = eqx.field(static=True)
    levels: int = eqx.field(static=True)
    spectral: bool = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        model_channels: int = 128,
        channel_mult: tuple[int, ...] = (2, 2, 2),
        num_blocks: int = 4,
        attn_resolutions: tuple[int, ...] = (16,),
        dropout: float = 0.10,
        resolution: int = 128,
        uno: bool = False,
        fmult: float = 1.0,
        rank: float = 1.0,
        key,
    ):
        mult = tuple(int(m) for m in channel_mult)
        if not mult or num_blocks < 1 or model_channels < 4:
            raise ValueError(
                "channel_mult, num_blocks, model_channels: expected a non-empty tuple, >= 1 and >= 4, got "
                f"{channel_mult!r}, {num_blocks!r}, {model_channels!r}"
            )
        if resolution % 2 ** (len(mult) - 1):
            raise ValueError(f"resolution: expected a multiple of 2^(levels - 1), got {resolution}")
        if not 0.0 < fmult <= 1.0 or rank <= 0.0:
            raise ValueError(f"fmult, rank: expected fmult in (0, 1] and rank > 0, got {fmult!r}, {rank!r}")
        keys = iter(jr.split(key, 8 + 2 * len(mult) * (num_blocks + 2)))
        emb = 4 * model_channels
        self.in_channels, self.out_channels, self.levels, self.spectral = (
            in_channels, out_channels, len(mult), uno,
        )  # fmt: skip
        self.noise_channels = model_channels
        self.map0 = Linear(model_channels, emb, key=next(keys))
        self.map1 = Linear(emb, emb, key=next(keys))

        def modes(res):
            return (int(res * fmult), int(res * fmult)) if uno else None

        def block(cin, cout, res, **kw):
            return Block(cin, cout, emb, dropout=dropout, modes=modes(res), rank=rank, key=next(keys), **kw)

        self.lift = (
            Conv2d(in_channels + 2, model_channels, 1, key=next(keys))
            if uno
            else Conv2d(in_channels, model_channels, 3, key=next(keys))
        )
        enc, skips, c = [], [model_channels], model_channels
        for level, m in enumerate(mult):
            res = resolution >> level
            if level:
                enc.append(block(c, c, res, resample="down"))
                skips.append(c)
            for _ in range(num_blocks):
                enc.append(block(c, model_channels * m, res, attention=res in attn_resolutions))
                c = model_channels * m
                skips.append(c)
        dec, takes = [], []
        for level, m in reversed(list(enumerate(mult))):
            res = resolution >> level
            if level == len(mult) - 1:
                dec += [block(c, c, res, attention=True), block(c, c, res)]
                takes += [False, False]
            else:
                dec.append(block(c, c, res, resample="up"))
                takes.append(False)
            for idx in range(num_blocks + 1):
                att = idx == num_blocks and res in attn_resolutions
                dec.append(block(c + skips.pop(), model_channels * m, res, attention=att))
                takes.append(True)
                c = model_channels * m
        self.enc, self.dec, self.takes_skip = tuple(enc), tuple(dec), tuple(takes)
        self.out_norm = group_norm(c)
        self.out = Conv2d(c, out_channels, 1 if uno else 3, key=next(keys), scale=1e-5)

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        check_channels(x, self.in_channels)
        if t is None:
            raise ValueError("t: expected the noise level c_noise for this diffusion backbone, got None")
        h, w = x.shape[-2:]
        if h % 2 ** (self.levels - 1) or w % 2 ** (self.levels - 1):
            raise ValueError(f"x: expected H, W divisible by {2 ** (self.levels - 1)}, got {(h, w)}")
        emb = positional_embedding(t, self.noise_channels)
        emb = jax.nn.silu(self.map1(jax.nn.silu(self.map0(emb))))
        blocks = len(self.enc) + len(self.dec)
        keys = [None] * blocks if key is None else list(jr.split(key, blocks))
        if self.spectral:
            gy, gx = jnp.meshgrid(jnp.linspace(0, 1, h), jnp.linspace(0, 1, w), indexing="ij")
            x = jnp.concatenate([x, gy[None].astype(x.dtype), gx[None].astype(x.dtype)])
        v = self.lift(x)
        skips = [v]
        for i, b in enumerate(self.enc):
            v = b(v, emb, keys[i])
            skips.append(v)
        for j, (b, takes) in enumerate(zip(self.dec, self.takes_skip, strict=True)):
            if takes:
                v = jnp.concatenate([v, skips.pop()])
            v = b(v, emb, keys[len(self.enc) + j])
        return self.out(jax.nn.silu(self.out_norm(v)))


class SongUNet(_SongNet):
    """DDPM++ U-Net `(C_in, H, W), c_noise -> (C_out, H, W)`; `__call__(x, t, *, key=None)` (module doc).

    Defaults are the ``ddpmpp`` preset (EDM `train.py`): model_channels 128, channel_mult (2, 2, 2),
    num_blocks 4, attn_resolutions (16,), dropout 0.10 (PosteriorBench trains with 0.13);
    `resolution` is the nominal grid size (attention placement).
    """

    def __init__(
        self, in_channels: int, out_channels: int, *, model_channels: int = 128,
        channel_mult: tuple[int, ...] = (2, 2, 2), num_blocks: int = 4,
        attn_resolutions: tuple[int, ...] = (16,),
        dropout: float = 0.10, resolution: int = 128, key,
    ):  # fmt: skip
        super().__init__(
            in_channels, out_channels, model_channels=model_channels, channel_mult=channel_mult,
            num_blocks=num_blocks, attn_resolutions=attn_resolutions, dropout=dropout, resolution=resolution,
            key=key,
        )  # fmt: skip


class SongUNO(_SongNet):
    """FunDPS ``ddpmpp-uno`` `(C_in, H, W), c_noise -> (C_out, H, W)` (module doc).

    SongUNet's options plus fmult (modes int(res * fmult) per axis; default 1.0) and rank (relative
    Tucker rank; 1.0 = dense). The published FunDPS prior (`configs/training/*_fundps_*.yml`):
    model_channels 64, channel_mult (1, 2, 4, 4), num_blocks 4, attn (16,), dropout 0.13, fmult
    0.5, rank 0.1, resolution (``nn_resolution``) 64.
    """

    def __init__(
        self, in_channels: int, out_channels: int, *, model_channels: int = 128,
        channel_mult: tuple[int, ...] = (1, 2, 2, 2), num_blocks: int = 4,
        attn_resolutions: tuple[int, ...] = (16,),
        dropout: float = 0.10, resolution: int = 64, fmult: float = 1.0, rank: float = 1.0, key,
    ):  # fmt: skip
        super().__init__(
            in_channels, out_channels, model_channels=model_channels, channel_mult=channel_mult,
            num_blocks=num_blocks, attn_resolutions=attn_resolutions, dropout=dropout, resolution=resolution,
            uno=True, fmult=fmult, rank=rank, key=key,
        )  # fmt: skip
