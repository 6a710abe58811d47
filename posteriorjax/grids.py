"""Static grid descriptions, spectral transforms and radial binning.

A `Grid` is hashable metadata (never traced). Fields on it are arrays `(n, n)`
(or `(C, n, n)`) indexed `[y, x]`.

Point conventions (unit: the domain length `length`):
  * ``dirichlet`` -- interior nodes x_i = (i + 1) h, h = L / (n + 1); the
    boundary nodes x = 0, L carry the boundary value and are not stored. Type-I
    sine transforms diagonalize the 5-point Laplacian on these nodes.
  * ``periodic`` -- x_i = i h, h = L / n. FFTs diagonalize derivatives.
  * ``neumann`` -- cell centres x_i = (i + 1/2) h, h = L / n. Type-II cosine
    transforms diagonalize the 5-point Laplacian with zero-flux boundaries (the
    basis of the FNO/DiffusionPDE Gaussian random fields).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks

BOUNDARY_CONDITIONS = ("dirichlet", "periodic", "neumann")


@dataclasses.dataclass(frozen=True)
class Grid:
    """Uniform square grid of `n x n` points on `[0, length]^2`.

    Attributes:
      n: points per axis.
      length: side of the square domain.
      bc: one of ``"dirichlet"``, ``"periodic"``, ``"neumann"`` (see module doc).
    """

    n: int
    length: float = 1.0
    bc: str = "dirichlet"

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 2:
            raise ValueError(f"Grid: n must be an integer >= 2, got {self.n!r}")
        checks.positive("Grid: length", self.length)
        checks.in_choices("Grid: bc", self.bc, BOUNDARY_CONDITIONS)
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "length", float(self.length))

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def spacing(self) -> float:
        """Point spacing h."""
        if self.bc == "dirichlet":
            return self.length / (self.n + 1)
        return self.length / self.n

    def points(self) -> np.ndarray:
        """1-D coordinates `(n,)` of the stored points along either axis."""
        i = np.arange(self.n, dtype=np.float64)
        h = self.spacing
        if self.bc == "dirichlet":
            return (i + 1) * h
        if self.bc == "periodic":
            return i * h
        return (i + 0.5) * h

    def mesh(self) -> tuple[np.ndarray, np.ndarray]:
        """Coordinates `(y, x)`, each `(n, n)`, indexed `[y, x]`."""
        p = self.points()
        y, x = np.meshgrid(p, p, indexing="ij")
        return y, x

    def check_field(self, x, name: str = "x", channels: int | None = None) -> None:
        """Raise ValueError unless `x` is `(n, n)` or, with `channels`, `(channels, n, n)`."""
        expected = self.shape if channels is None else (channels, *self.shape)
        if tuple(jnp.shape(x)) != expected:
            raise ValueError(f"{name}: expected shape {expected} for {self}, got {tuple(jnp.shape(x))}")


# ----------------------------------------------------------------------------
# Fourier wavenumbers


def fft_wavenumbers(n: int, length: float = 1.0, *, real: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Angular wavenumbers `(ky, kx)` of `fft2` (or `rfft2` with `real=True`).

    Returns 2-D arrays broadcast to the transform's shape, in radians per unit
    length: k = 2 pi m / L with integer m from `np.fft.fftfreq`.
    """
    m_y = np.fft.fftfreq(n, d=1.0 / n)
    m_x = np.fft.rfftfreq(n, d=1.0 / n) if real else m_y
    ky, kx = np.meshgrid(m_y, m_x, indexing="ij")
    scale = 2.0 * np.pi / length
    return scale * ky, scale * kx


def dealias_mask(n: int, *, real: bool = True) -> np.ndarray:
    """Boolean 2/3-rule mask: keep |m_x|, |m_y| <= (2/3) (n/2)."""
    m_y = np.abs(np.fft.fftfreq(n, d=1.0 / n))
    m_x = np.abs(np.fft.rfftfreq(n, d=1.0 / n) if real else m_y)
    cutoff = (2.0 / 3.0) * (n // 2)
    return (m_y[:, None] <= cutoff) & (m_x[None, :] <= cutoff)


# ----------------------------------------------------------------------------
# Type-I sine transform (Dirichlet) built on FFTs


def _dst1_axis(x: jnp.ndarray, axis: int) -> jnp.ndarray:
    """Orthonormal DST-I along one axis via the odd extension of length 2(n+1).

    X_k = sqrt(2/(n+1)) sum_j x_j sin(pi (j+1)(k+1)/(n+1)); the transform is
    its own inverse.
    """
    x = jnp.moveaxis(x, axis, -1)
    n = x.shape[-1]
    zero = jnp.zeros(x.shape[:-1] + (1,), x.dtype)
    ext = jnp.concatenate([zero, x, zero, -jnp.flip(x, axis=-1)], axis=-1)
    spec = jnp.fft.rfft(ext, axis=-1)
    out = -0.5 * spec[..., 1 : n + 1].imag * np.sqrt(2.0 / (n + 1))
    return jnp.moveaxis(out.astype(x.dtype), -1, axis)


def dst1(x: jnp.ndarray, axes: tuple[int, ...] = (-2, -1)) -> jnp.ndarray:
    """Orthonormal type-I sine transform over `axes` (self-inverse)."""
    for ax in axes:
        x = _dst1_axis(x, ax)
    return x


def idst1(x: jnp.ndarray, axes: tuple[int, ...] = (-2, -1)) -> jnp.ndarray:
    """Inverse of `dst1` (the orthonormal DST-I is an involution)."""
    return dst1(x, axes)


def sine_matrix(n: int, dtype=np.float64) -> np.ndarray:
    """Dense orthonormal DST-I matrix S (symmetric, S @ S = I), `(n, n)`."""
    j = np.arange(1, n + 1)
    return (np.sqrt(2.0 / (n + 1)) * np.sin(np.pi * np.outer(j, j) / (n + 1))).astype(dtype)


def cosine_matrix(n: int, dtype=np.float64) -> np.ndarray:
    """Dense orthonormal DCT-II matrix D `(n, n)` (D^T D = I), the transform of the ``neumann`` grid.

    D_kj = sqrt(2/n) f_k cos(pi k (j + 1/2) / n), f_0 = 1/sqrt(2), f_k = 1 otherwise;
    `scipy.fft.dct(x, type=2, norm="ortho")` is D x.
    """
    k, j = np.arange(n)[:, None], np.arange(n)[None, :]
    d = np.sqrt(2.0 / n) * np.cos(np.pi * k * (j + 0.5) / n)
    d[0] /= np.sqrt(2.0)
    return d.astype(dtype)


@functools.lru_cache(maxsize=32)
def _matrix(kind: str, n: int) -> np.ndarray:
    m = cosine_matrix(n) if kind == "cosine" else sine_matrix(n)
    m.setflags(write=False)
    return m


def separable_transform(x: jnp.ndarray, kind: str, *, inverse: bool = False) -> jnp.ndarray:
    """2-D orthonormal DCT-II (``kind="cosine"``) or DST-I (``"sine"``) over the last two axes by matmuls.

    Forward M x M^T, inverse M^T c M, with M = `cosine_matrix` or `sine_matrix`
    (float64-built, cast to x's dtype; `Precision.HIGHEST`). Square fields `(..., n, n)`.
    O(n^3) per field, but on matrix units (and XLA's CPU GEMM) far faster than
    FFT-based transforms up to a few hundred points per axis.
    """
    if kind not in ("cosine", "sine"):
        raise ValueError(f"kind: expected 'cosine' or 'sine', got {kind!r}")
    n = x.shape[-1]
    if x.ndim < 2 or x.shape[-2] != n:
        raise ValueError(f"x: expected square fields (..., n, n), got shape {x.shape}")
    m = jnp.asarray(_matrix(kind, n), x.dtype)
    if inverse:
        m = m.T
    hi = jax.lax.Precision.HIGHEST
    return jnp.einsum("kj,...jl,ml->...km", m, x, m, precision=hi)


def dirichlet_laplacian_eigenvalues(n: int, length: float = 1.0) -> np.ndarray:
    """Eigenvalues `(n, n)` of the 5-point -Laplacian on interior Dirichlet nodes.

    lambda_{pq} = (4/h^2) [sin^2(pi p / (2(n+1))) + sin^2(pi q / (2(n+1)))],
    p, q = 1..n, h = length / (n + 1); eigenvectors are the DST-I modes.
    """
    h = length / (n + 1)
    s = np.sin(np.pi * np.arange(1, n + 1) / (2 * (n + 1))) ** 2 * (4.0 / h**2)
    return s[:, None] + s[None, :]


# ----------------------------------------------------------------------------
# Radial binning (radially averaged power spectra)


def radial_bins(shape: tuple[int, int]) -> tuple[np.ndarray, int]:
    """Radial bin index of every pixel of an unshifted `fft2` of `shape`.

    Radius r = sqrt(fx^2 + fy^2) in cycles per sample (`np.fft.fftfreq`); bins
    of width 1 / min(H, W) from 0 up to 0.5, giving min(H, W) // 2 bins. Pixels
    with r >= 0.5 (corners, Nyquist) get index -1. This is the binning of the
    published posterior-matching benchmark.

    Returns:
      (index `(H, W)` int, number of bins).
    """
    h, w = shape
    step = 1.0 / min(h, w)
    fy, fx = np.meshgrid(np.fft.fftfreq(h), np.fft.fftfreq(w), indexing="ij")
    r = np.sqrt(fx**2 + fy**2)
    edges = np.arange(0.0, 0.5 + step, step)
    num_bins = len(edges) - 1
    index = np.digitize(r, edges) - 1
    index = np.where((index >= 0) & (index < num_bins), index, -1)
    return index, num_bins


def radial_average(values: jnp.ndarray, index: np.ndarray, num_bins: int) -> jnp.ndarray:
    """Mean of `values` `(..., H, W)` over each radial bin -> `(..., num_bins)`.

    Pixels with index -1 are dropped; an empty bin averages to 0.
    """
    flat_index = jnp.asarray(index.reshape(-1))
    one_hot = (flat_index[:, None] == jnp.arange(num_bins)[None, :]).astype(values.dtype)
    counts = one_hot.sum(axis=0)
    sums = values.reshape(values.shape[:-2] + (-1,)) @ one_hot
    return sums / jnp.maximum(counts, 1)
