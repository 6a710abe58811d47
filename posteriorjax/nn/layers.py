"""Building blocks shared by the networks: pointwise linear maps, dropout, spectral convolution.

All layers act on one field `(C, H, W)` (channel-first, no batch axis); vmap outward.
Stochastic layers take an optional `key`: `key=None` is evaluation mode (deterministic),
a key switches dropout on -- during training, and at inference for MC dropout.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

SPECTRAL_PATHS = ("auto", "fft", "matmul")
# Full float32 products for the DFT matrices: on accelerators the default precision may round
# the operands to bf16/TF32, which an FFT never does (CPU ignores the setting).
DFT_PRECISION = jax.lax.Precision.HIGHEST
# Matmul path when its multiply-adds are at most this many times the FFT cost model's
# N log2 N terms (see `spectral_path`). XLA's CPU FFT runs at a small fraction of its matmul
# rate, so the CPU takes dense DFTs up to a high ratio; a GPU's FFT is fast, so it stops sooner;
# the TPU value is a guess (matrix units favour dense DFTs), not measured. The timings that set
# the CPU and GPU values: docs/studies/performance.md, "Transforms as matmuls" and "On an H200 GPU".
MATMUL_COST_RATIO = {"cpu": 10.0, "gpu": 5.0, "tpu": 16.0}
# `SpectralConv._mix` builds the real block matrix of the complex channel mixing up to this many
# complex weights (C_out C_in 2 m1 m2): one product per mode instead of two, and fewer layout
# copies. Above it, building the block (four times the weights) moves more memory than the one
# product saves; the comparison that set it is in docs/studies/performance.md ("Transforms as
# matmuls").
BLOCK_MIXING_MAX_WEIGHTS = 2**17


def check_channels(x: jax.Array, expected: int, name: str = "x") -> None:
    """Raise unless `x` is one field `(expected, H, W)`."""
    if x.ndim != 3 or x.shape[0] != expected:
        raise ValueError(f"{name}: expected a field (C={expected}, H, W), got shape {x.shape}")


class Pointwise(eqx.Module):
    """Per-point linear map (a 1x1 convolution): `(C_in, H, W) -> (C_out, H, W)`, y = W x + b."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, in_channels: int, out_channels: int, *, key, zero: bool = False):
        scale = 0.0 if zero else 1.0 / math.sqrt(in_channels)
        self.weight = scale * jr.normal(key, (out_channels, in_channels))
        self.bias = jnp.zeros((out_channels,))

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.einsum("oi,i...->o...", self.weight, x) + self.bias.reshape(-1, *([1] * (x.ndim - 1)))


class Dropout(eqx.Module):
    """Inverted dropout with rate `rate`; active only when a `key` is passed (MC dropout: pass one).

    Any shape in, the same shape out, e.g. `(C, H, W) -> (C, H, W)`: each value is zeroed with
    probability `rate` and the kept ones scaled by 1 / (1 - rate), so the mean is unchanged
    (Srivastava et al. 2014; Gal & Ghahramani 2016 for MC dropout).
    """

    rate: float = eqx.field(static=True)

    def __check_init__(self):
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"rate: expected a dropout rate in [0, 1), got {self.rate!r}")

    def __call__(self, x: jax.Array, *, key=None) -> jax.Array:
        if key is None or self.rate == 0.0:
            return x
        keep = jr.bernoulli(key, 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0).astype(x.dtype)


class ChannelMLP(eqx.Module):
    """Two pointwise layers with GELU and dropout between: `(C, H, W) -> (C_out, H, W)`."""

    fc1: Pointwise
    fc2: Pointwise
    dropout: Dropout

    def __init__(self, in_channels: int, hidden: int, out_channels: int, *, dropout: float = 0.0, key):
        k1, k2 = jr.split(key)
        self.fc1 = Pointwise(in_channels, hidden, key=k1)
        self.fc2 = Pointwise(hidden, out_channels, key=k2)
        self.dropout = Dropout(dropout)

    def __call__(self, x: jax.Array, *, key=None) -> jax.Array:
        return self.fc2(self.dropout(jax.nn.gelu(self.fc1(x)), key=key))


def spectral_resample(x: jax.Array, size: tuple[int, int]) -> jax.Array:
    """Band-limited resampling of periodic fields `(..., H, W) -> (..., size)`.

    Truncates or zero-pads the rfft2 spectrum; point values of a trigonometric
    polynomial resolved on both grids are preserved exactly.
    """
    h, w = x.shape[-2:]
    if (h, w) == tuple(size):
        return x
    sh, sw = size
    f = jnp.fft.rfft2(x)
    mh, mw = min(h, sh) // 2, min(w, sw) // 2 + 1
    out = jnp.zeros((*x.shape[:-2], sh, sw // 2 + 1), f.dtype)
    out = out.at[..., :mh, :mw].set(f[..., :mh, :mw])
    out = out.at[..., sh - mh :, :mw].set(f[..., h - mh :, :mw])
    return (jnp.fft.irfft2(out, s=size) * (sh * sw) / (h * w)).astype(x.dtype)


class SpectralConv(eqx.Module):
    """Fourier integral operator of the FNO (Li et al. 2021, Eq. 4) on rfft2 modes.

    (K v)(x) = irfft2( R(k) . rfft2(v)(k) ) with R a learned complex `(C_out, C_in)`
    matrix for |k_y| < modes[0], 0 <= k_x < modes[1] (two row blocks for k_y >= 0 and
    k_y < 0) and zero elsewhere. Unnormalized forward / 1/(HW) inverse FFTs make the
    operator act on the underlying function, so weights transfer across resolutions.
    `out_size` (a fraction of the input size, UNO-style) evaluates the result on a
    different grid.
    """

    weight_re: jax.Array
    weight_im: jax.Array
    modes: tuple[int, int] = eqx.field(static=True)

    def __init__(self, in_channels: int, out_channels: int, modes: tuple[int, int], *, key):
        m1, m2 = modes
        if m1 < 1 or m2 < 1:
            raise ValueError(f"modes: expected positive mode counts, got {modes!r}")
        scale = 1.0 / (in_channels * out_channels)
        k1, k2 = jr.split(key)
        shape = (2, out_channels, in_channels, m1, m2)
        self.weight_re = scale * jr.uniform(k1, shape)
        self.weight_im = scale * jr.uniform(k2, shape)
        self.modes = (int(m1), int(m2))

    def __call__(
        self, x: jax.Array, out_size: tuple[int, int] | None = None, *, path: str = "auto"
    ) -> jax.Array:
        """`(C_in, H, W) -> (C_out, *out_size)`; `path` is ``"fft"``, ``"matmul"`` or ``"auto"``."""
        h, w = x.shape[-2:]
        sh, sw = (h, w) if out_size is None else tuple(out_size)
        m1, m2 = self.modes
        if 2 * m1 > min(h, sh) or m2 > min(w, sw) // 2 + 1:
            raise ValueError(
                f"x: grid {(h, w)} -> {(sh, sw)} resolves fewer Fourier modes than modes={self.modes}; "
                f"expected H, W >= {2 * m1}, {2 * (m2 - 1)}"
            )
        if path == "auto":
            path = spectral_path((h, w), (sh, sw), self.modes, x.shape[0], self.weight_re.shape[1])
        if path == "fft":
            return self._fft(x, (sh, sw))
        if path == "matmul":
            return self._matmul(x, (sh, sw))
        raise ValueError(f"path: expected one of {SPECTRAL_PATHS}, got {path!r}")

    def _fft(self, x, out_size):
        h, w = x.shape[-2:]
        sh, sw = out_size
        m1, m2 = self.modes
        f = jnp.fft.rfft2(x)
        wgt = (self.weight_re + 1j * self.weight_im).astype(f.dtype)
        top = jnp.einsum("oixy,ixy->oxy", wgt[0], f[:, :m1, :m2])
        bottom = jnp.einsum("oixy,ixy->oxy", wgt[1], f[:, h - m1 :, :m2])
        out = jnp.zeros((wgt.shape[1], sh, sw // 2 + 1), f.dtype)
        out = out.at[:, :m1, :m2].set(top).at[:, sh - m1 :, :m2].set(bottom)
        return (jnp.fft.irfft2(out, s=(sh, sw)) * (sh * sw) / (h * w)).astype(x.dtype)

    def _matmul(self, x, out_size):
        """The same operator as `_fft` by real matmuls with truncated DFT matrices (`dft_conv`)."""
        m1, m2 = self.modes
        return dft_conv(x, out_size, spectral_rows(m1), m2, self._mix)

    def _mix(self, fr: jax.Array, fi: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Z = R f at each kept mode (`mix_modes`): `(C_in, m2, 2 m1)` pairs -> `(C_out, m2, 2 m1)`."""
        o, i = self.weight_re.shape[1:3]
        m1, m2 = self.modes
        # (2, o, i, m1, m2) -> (o, i, m2, 2 m1): the rows k_y >= 0 then k_y < 0, as `spectral_rows`
        wr, wi = (
            jnp.transpose(wt, (1, 2, 4, 0, 3)).reshape(o, i, m2, 2 * m1)
            for wt in (self.weight_re, self.weight_im)
        )
        return mix_modes(wr, wi, fr, fi)


def spectral_rows(m1: int) -> tuple[int, ...]:
    """The k_y rows `SpectralConv` keeps: 0, ..., m1 - 1, then -m1, ..., -1."""
    return (*range(m1), *range(-m1, 0))


def dft_conv(x: jax.Array, out_size: tuple[int, int], rows: tuple[int, ...], m2: int, mix) -> jax.Array:
    """A spectral convolution on the kept modes by real matmuls with truncated DFT matrices.

    `(C_in, H, W) -> (C_out, S_h, S_w)`: y = irfft2(Z) * (S_h S_w) / (H W) on the output grid, where
    Z = mix(f) on the kept modes (k_y in `rows`, signed, in that order; 0 <= k_x < m2) and zero
    elsewhere, f the kept rfft2 coefficients of x. `mix(fr, fi)` maps the real and imaginary parts
    `(C_in, m2, R)` (R = len(rows)) to `(C_out, m2, R)` pairs.

    With A = x [cos | -sin] along W (kept k_x) and G the product of A with [cos; -sin] along H
    (kept k_y), laid out `(C_in, 2 m2, 2 R)` with blocks G_ab, a the k_x half (c: cos, s: sin) and
    b the k_y half, f = (G_cc - G_ss) + i (G_sc + G_cs). After the mixing, the blocks [Z_r | Z_i]
    (k_x cos half) and [Z_i | -Z_r] (sin half) times [cos | -sin] along H give the real and
    imaginary parts of the inverse DFT along H, and [c cos; -c sin] / (H W) along W the inverse
    real DFT, c_k the Hermitian weights (1 at k_x = 0 and Nyquist, 2 elsewhere): `dft_matrices`.
    """
    h, w = x.shape[-2:]
    r = len(rows)
    fw, fh, eh, pw = (jnp.asarray(a, x.dtype) for a in dft_matrices((h, w), tuple(out_size), tuple(rows), m2))
    mm = functools.partial(jnp.einsum, precision=DFT_PRECISION)
    # contracting H with the k_x columns before k_y rows keeps each product a plain GEMM
    # and the mixing's input one transpose away from its batched layout
    g = mm("chk,jh->ckj", mm("chw,wk->chk", x, fw), fh)
    gc, gs = g[:, :m2], g[:, m2:]
    zr, zi = mix(gc[..., :r] - gs[..., r:], gs[..., :r] + gc[..., r:])
    z = jnp.concatenate([jnp.concatenate([zr, zi], -1), jnp.concatenate([zi, -zr], -1)], axis=1)
    return mm("oky,kx->oyx", mm("okj,yj->oky", z, eh), pw).astype(x.dtype)


def mix_modes(wr: jax.Array, wi: jax.Array, fr: jax.Array, fi: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Complex channel mixing Z = R f at each kept mode, in real arithmetic.

    `wr`, `wi` `(C_out, C_in, m2, R)` the real and imaginary weights; `fr`, `fi` `(C_in, m2, R)`;
    returns (Z_r, Z_i) `(C_out, m2, R)`. Up to `BLOCK_MIXING_MAX_WEIGHTS` complex weights, one real
    product per mode with the block matrix [[R_r, -R_i], [R_i, R_r]] on [f_r; f_i]; above it (where
    building the block, four times the weights, costs more than the products it saves), two
    products, of R_r and R_i with the stacked [f_r, f_i].
    """
    o, i, m2, r = wr.shape
    wr, wi = wr.astype(fr.dtype), wi.astype(fr.dtype)
    if o * i * m2 * r <= BLOCK_MIXING_MAX_WEIGHTS:
        # the modes leading: the batched einsum wants the batch (mode) axes first, and the
        # two-product layout was slower here on the CPU (docs/studies/performance.md)
        wr, wi = (jnp.transpose(wt, (2, 3, 0, 1)) for wt in (wr, wi))
        block = jnp.concatenate([jnp.concatenate([wr, -wi], -1), jnp.concatenate([wi, wr], -1)], -2)
        f = jnp.transpose(jnp.concatenate([fr, fi]), (1, 2, 0))
        z = jnp.einsum("kjoi,kji->okj", block, f)
        return z[:o], z[o:]
    f = jnp.stack([fr, fi])
    p, q = (jnp.einsum("oikj,sikj->sokj", wt, f) for wt in (wr, wi))
    return p[0] - q[1], p[1] + q[0]


@functools.lru_cache(maxsize=128)
def dft_matrices(in_size: tuple[int, int], out_size: tuple[int, int], rows: tuple[int, ...], m2: int):
    """Truncated DFT matrices of `dft_conv` (float64 NumPy, read-only).

    For input grid (H, W), output grid (S_h, S_w), kept rows j in `rows` (signed k_y, R of them)
    and columns k in [0, m2):
      fw `(W, 2 m2)` = [cos | -sin](2 pi x k / W)                  forward, along W;
      fh `(2 R, H)` = [cos; -sin](2 pi j y / H)                    forward, along H;
      eh `(S_h, 2 R)` = [cos | -sin](2 pi y j / S_h)               inverse, along H;
      pw `(2 m2, S_w)` = [c cos; -c sin](2 pi k x / S_w) / (H W)   inverse real DFT, along W,
    with c_k = 1 for k = 0 and k = S_w / 2, else 2 (irfft's Hermitian weights; the
    1/(H W) is the operator's normalization, as in the FFT path).
    """
    (h, w), (sh, sw) = in_size, out_size
    rows = np.asarray(rows)
    k = np.arange(m2)
    ang = 2 * np.pi * np.outer(np.arange(w), k) / w
    fw = np.concatenate([np.cos(ang), -np.sin(ang)], axis=1)
    ang = 2 * np.pi * np.outer(rows % h, np.arange(h)) / h
    fh = np.concatenate([np.cos(ang), -np.sin(ang)], axis=0)
    ang = 2 * np.pi * np.outer(np.arange(sh), rows % sh) / sh
    eh = np.concatenate([np.cos(ang), -np.sin(ang)], axis=1)
    c = np.where((k == 0) | (2 * k == sw), 1.0, 2.0)[:, None]
    ang = 2 * np.pi * np.outer(k, np.arange(sw)) / sw
    pw = np.concatenate([c * np.cos(ang), -c * np.sin(ang)], axis=0) / (h * w)
    for a in (fw, fh, eh, pw):
        a.setflags(write=False)
    return fw, fh, eh, pw


def spectral_cost(in_size, out_size, modes, in_channels: int, out_channels: int) -> tuple[float, float]:
    """`(matmul multiply-adds, FFT cost N log2 N)` of one `dft_conv` call (channel mixing excluded).

    `modes` = (m1, m2): 2 m1 kept k_y rows (`SpectralConv`'s modes; for `TuckerSpectralConv` half
    its row count, possibly a half-integer) and m2 kept k_x columns. Matmul:
    C_in (H W 2 m2 + 4 m1 H 2 m2) + C_out (S_h 4 m1 2 m2 + S_h 2 m2 S_w); FFT:
    C_in H W log2(H W) + C_out S_h S_w log2(S_h S_w) for rfft2 and irfft2.
    """
    (h, w), (sh, sw), (m1, m2) = in_size, out_size, modes
    mm = in_channels * (h * w * 2 * m2 + 4 * m1 * h * 2 * m2) + out_channels * (
        sh * 4 * m1 * 2 * m2 + sh * 2 * m2 * sw
    )
    fft = in_channels * h * w * math.log2(h * w) + out_channels * sh * sw * math.log2(sh * sw)
    return float(mm), float(fft)


def spectral_path(
    in_size, out_size, modes, in_channels: int, out_channels: int, backend: str | None = None
) -> str:
    """``"matmul"`` where the truncated-DFT matmuls beat the FFTs on `backend`, else ``"fft"``.

    The rule: matmul multiply-adds <= `MATMUL_COST_RATIO[backend]` x the FFT's N log2 N
    (`spectral_cost`). Few kept modes (modes << n/2) favour matmuls, modes near n/2 the FFT.
    `backend` defaults to `jax.default_backend()`; an unknown one takes the GPU's threshold.
    """
    backend = jax.default_backend() if backend is None else backend
    mm, fft = spectral_cost(in_size, out_size, modes, in_channels, out_channels)
    return "matmul" if mm <= MATMUL_COST_RATIO.get(backend, MATMUL_COST_RATIO["gpu"]) * fft else "fft"


def periodic_coordinates(shape: tuple[int, int], dtype=jnp.float32) -> jax.Array:
    """Band-limited position features `(4, H, W)`: sin/cos(2 pi y), sin/cos(2 pi x) on x_j = j / n."""
    y = jnp.arange(shape[0], dtype=dtype) / shape[0]
    x = jnp.arange(shape[1], dtype=dtype) / shape[1]
    yy, xx = jnp.meshgrid(y, x, indexing="ij")
    t = 2 * jnp.pi
    return jnp.stack([jnp.sin(t * yy), jnp.cos(t * yy), jnp.sin(t * xx), jnp.cos(t * xx)])
