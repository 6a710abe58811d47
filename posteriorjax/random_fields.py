"""Gaussian random fields and the priors built from them.

Every prior maps a standard-normal *latent* pytree to a field `(C, H, W)`:
`sample(key) = transform(latent(key))`. Working in latent space lets MCMC and
ensemble methods treat thresholded, hierarchical and log-normal priors alike
(pCN on the latent is exact for the prior). Hyperparameters drawn per sample
(hierarchical priors) are latent standard normals pushed through the normal CDF,
so the whole latent stays standard normal.

Gaussian random fields (`GaussianRandomField`) follow the FNO/DiffusionPDE data
generators: the covariance is diagonal in an orthonormal basis `T` of -Laplacian
eigenfunctions with per-mode standard deviation

    s_k = sigma * n * tau^(alpha - 1) * (lambda_k + tau^2)^(-alpha / 2),

lambda_k the continuous -Laplacian eigenvalue of mode k on [0, L]^2:
  * ``cosine``  (Neumann; `GRF.m`, cell centres): lambda = (pi/L)^2 (kx^2 + ky^2), k = 0..n-1,
    mean mode removed (s_0 = 0);
  * ``sine``    (Dirichlet; interior nodes): lambda = (pi/L)^2 (p^2 + q^2), p, q = 1..n;
  * ``fourier`` (periodic): lambda = (2 pi/L)^2 |m|^2, m = fftfreq integers, mean mode removed.
The factor n makes grid-orthonormal modes unit-L^2 functions, so the pointwise
variance, sum_k (s_k / n)^2, does not depend on the resolution. Fields are
`T^-1 (s * T xi)` with white `xi`: the symmetric square root of the covariance
`C = T^-1 diag(s^2) T`, whose log-density and score are closed form.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.scipy.fft import dctn, idctn
from jax.scipy.special import ndtr

from posteriorjax import checks, grids, rng

BASES = ("cosine", "sine", "fourier")
TRANSFORM_METHODS = ("auto", "matmul", "fft")
# Largest n at which "auto" uses the dense matmul transform (`grids.separable_transform`):
# jax.scipy's dctn is built from FFTs plus reorders, and XLA's CPU FFT runs far below its
# matmul rate, so the dense DCT-II matrices win up to here (timed at n = 16-256 on a CPU:
# docs/studies/performance.md, "Transforms as matmuls"); on matrix units the margin is larger.
MATMUL_MAX_N = {"cpu": 256, "gpu": 1024, "tpu": 1024}


def _check_range(name: str, bounds) -> tuple[float, float]:
    lo, hi = (float(b) for b in bounds)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ValueError(f"{name}: expected (low, high) with 0 < low <= high, got {bounds!r}")
    return lo, hi


def laplacian_eigenvalues(n: int, basis: str, length: float = 1.0) -> np.ndarray:
    """Continuous -Laplacian eigenvalue of every basis mode, `(n, n)`, in the transform's layout."""
    if basis == "cosine":
        k = np.arange(n)
        scale = (np.pi / length) ** 2
    elif basis == "sine":
        k = np.arange(1, n + 1)
        scale = (np.pi / length) ** 2
    elif basis == "fourier":
        k = np.fft.fftfreq(n, d=1.0 / n)
        scale = (2 * np.pi / length) ** 2
    else:
        raise ValueError(f"basis: expected one of {BASES}, got {basis!r}")
    return scale * (k[:, None] ** 2 + k[None, :] ** 2)


def _mean_mode(n: int, basis: str) -> np.ndarray:
    """Boolean `(n, n)`: the constant mode, which the zero-mean bases drop."""
    mask = np.zeros((n, n), bool)
    if basis != "sine":
        mask[0, 0] = True
    return mask


def _use_matmul(x: jnp.ndarray, basis: str, method: str) -> bool:
    checks.in_choices("method", method, TRANSFORM_METHODS)
    if basis == "fourier":
        if method == "matmul":
            raise ValueError("method: the fourier basis has no matmul transform; expected 'auto' or 'fft'")
        return False
    if method != "auto":
        return method == "matmul"
    n = x.shape[-1]
    return x.shape[-2] == n and n <= MATMUL_MAX_N.get(jax.default_backend(), MATMUL_MAX_N["gpu"])


def forward_transform(x: jnp.ndarray, basis: str, *, method: str = "auto") -> jnp.ndarray:
    """Orthonormal transform T over the last two axes (complex for ``fourier``).

    ``cosine`` (DCT-II) and ``sine`` (DST-I) use dense matrices (`grids.separable_transform`)
    up to `MATMUL_MAX_N` points per axis on square fields with ``method="auto"``, else
    FFT-based transforms (``method="fft"``: `jax.scipy.fft.dctn`, `grids.dst1`); both agree
    to rounding. ``fourier`` always uses `fft2` (``method="matmul"`` is an error there).
    """
    use_matmul = _use_matmul(x, basis, method)
    if basis == "cosine":
        if use_matmul:
            return grids.separable_transform(x, "cosine")
        return dctn(x, type=2, axes=(-2, -1), norm="ortho")
    if basis == "sine":
        if use_matmul:
            return grids.separable_transform(x, "sine")
        return grids.dst1(x)
    return jnp.fft.fft2(x, norm="ortho")


def inverse_transform(c: jnp.ndarray, basis: str, *, method: str = "auto") -> jnp.ndarray:
    """Inverse of `forward_transform` (real part for ``fourier``); `method` as there."""
    use_matmul = _use_matmul(c, basis, method)
    if basis == "cosine":
        if use_matmul:
            return grids.separable_transform(c, "cosine", inverse=True)
        return idctn(c, type=2, axes=(-2, -1), norm="ortho")
    if basis == "sine":
        if use_matmul:
            return grids.separable_transform(c, "sine", inverse=True)
        return grids.idst1(c)
    return jnp.fft.ifft2(c, norm="ortho").real


def grf_mode_std(n: int, alpha, tau, basis: str, *, length: float = 1.0, sigma=1.0) -> jnp.ndarray:
    """Per-mode standard deviation s_k `(n, n)`; alpha, tau, sigma may be traced scalars."""
    lam = jnp.asarray(laplacian_eigenvalues(n, basis, length))
    s = sigma * n * tau ** (alpha - 1.0) * (lam + tau**2) ** (-alpha / 2.0)
    return jnp.where(jnp.asarray(_mean_mode(n, basis)), 0.0, s)


class GaussianRandomField(eqx.Module):
    """Zero-mean stationary GRF on an `n x n` grid with fixed (alpha, tau); `(1, n, n)` fields.

    Attributes:
      n: grid points per axis.
      alpha: smoothness exponent (> 1 for a finite pointwise variance in 2-D).
      tau: inverse length scale.
      basis: ``"cosine"``, ``"sine"`` or ``"fourier"`` (see module doc).
      length: domain side L.
      sigma: amplitude multiplier.
    """

    n: int = eqx.field(static=True)
    alpha: float = eqx.field(static=True)
    tau: float = eqx.field(static=True)
    basis: str = eqx.field(static=True, default="cosine")
    length: float = eqx.field(static=True, default=1.0)
    sigma: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        checks.in_choices("basis", self.basis, BASES)
        for name in ("alpha", "tau", "length", "sigma"):
            checks.positive(name, getattr(self, name))

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, self.n, self.n)

    def mode_std(self) -> jnp.ndarray:
        """Per-mode standard deviation `(n, n)` in the basis layout."""
        return grf_mode_std(self.n, self.alpha, self.tau, self.basis, length=self.length, sigma=self.sigma)

    def pointwise_variance(self) -> float:
        """Grid average of the pointwise variance, sum_k s_k^2 / n^2."""
        return float(jnp.sum(self.mode_std() ** 2) / self.n**2)

    def latent(self, key) -> jnp.ndarray:
        return rng.normal(key, self.shape)

    def transform(self, latent: jnp.ndarray) -> jnp.ndarray:
        return self.sqrt_cov_apply(latent)

    def sample(self, key) -> jnp.ndarray:
        return self.transform(self.latent(key))

    def _apply_spectral(self, x: jnp.ndarray, multiplier: jnp.ndarray) -> jnp.ndarray:
        return inverse_transform(forward_transform(x, self.basis) * multiplier, self.basis).astype(x.dtype)

    def sqrt_cov_apply(self, v: jnp.ndarray) -> jnp.ndarray:
        """C^(1/2) v for `v` `(..., n, n)` (symmetric square root)."""
        return self._apply_spectral(v, self.mode_std())

    def cov_apply(self, v: jnp.ndarray) -> jnp.ndarray:
        """C v for `v` `(..., n, n)`."""
        return self._apply_spectral(v, self.mode_std() ** 2)

    def precision_apply(self, v: jnp.ndarray) -> jnp.ndarray:
        """C^+ v (pseudo-inverse: the dropped mean mode maps to 0)."""
        s = self.mode_std()
        return self._apply_spectral(v, jnp.where(s > 0, 1.0 / jnp.where(s > 0, s, 1.0) ** 2, 0.0))

    def log_prob(self, x: jnp.ndarray) -> jnp.ndarray:
        """Gaussian log-density of `x` `(1, n, n)` on the support of C (zero mean for cosine/fourier)."""
        s = self.mode_std()
        active = s > 0
        c = forward_transform(x[0], self.basis)
        quad = jnp.sum(jnp.where(active, jnp.abs(c) ** 2 / jnp.where(active, s, 1.0) ** 2, 0.0))
        log_det = jnp.sum(jnp.where(active, jnp.log(jnp.where(active, s, 1.0)), 0.0))
        dim = jnp.sum(active)
        return -0.5 * quad - log_det - 0.5 * dim * jnp.log(2 * jnp.pi)

    def score(self, x: jnp.ndarray) -> jnp.ndarray:
        """grad log p(x) = -C^+ x, `(1, n, n)`."""
        return -self.precision_apply(x)


class HierarchicalGRF(eqx.Module):
    """GRF whose (alpha, tau) are drawn per sample, uniform on the given ranges.

    The latent is ``{"xi": (1, n, n), "hyper": (2,)}``, all standard normal;
    alpha = a0 + (a1 - a0) Phi(hyper[0]), tau likewise. The Poisson source prior of
    the posterior-matching benchmark is alpha ~ U[1.5, 3], tau ~ U[2, 4].
    """

    n: int = eqx.field(static=True)
    alpha_range: tuple[float, float] = eqx.field(static=True, default=(1.5, 3.0))
    tau_range: tuple[float, float] = eqx.field(static=True, default=(2.0, 4.0))
    basis: str = eqx.field(static=True, default="cosine")
    length: float = eqx.field(static=True, default=1.0)
    sigma: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        checks.in_choices("basis", self.basis, BASES)
        _check_range("alpha_range", self.alpha_range)
        _check_range("tau_range", self.tau_range)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, self.n, self.n)

    def latent(self, key) -> dict:
        k_xi, k_h = jr.split(key)
        return {"xi": rng.normal(k_xi, self.shape), "hyper": rng.normal(k_h, (2,))}

    def hyperparameters(self, latent: dict) -> tuple[jnp.ndarray, jnp.ndarray]:
        """(alpha, tau) encoded by a latent."""
        u = ndtr(latent["hyper"])
        a0, a1 = self.alpha_range
        t0, t1 = self.tau_range
        return a0 + (a1 - a0) * u[0], t0 + (t1 - t0) * u[1]

    def transform(self, latent: dict) -> jnp.ndarray:
        alpha, tau = self.hyperparameters(latent)
        s = grf_mode_std(self.n, alpha, tau, self.basis, length=self.length, sigma=self.sigma)
        xi = latent["xi"]
        return inverse_transform(forward_transform(xi, self.basis) * s, self.basis).astype(xi.dtype)

    def sample(self, key) -> jnp.ndarray:
        return self.transform(self.latent(key))

    def conditional(self, alpha: float, tau: float) -> GaussianRandomField:
        """The fixed-hyperparameter GRF given (alpha, tau)."""
        return GaussianRandomField(self.n, float(alpha), float(tau), self.basis, self.length, self.sigma)

    def pointwise_variance(self, num: int = 16) -> float:
        """Prior pointwise variance averaged over the grid and the hyperparameter ranges.

        E_{alpha, tau}[sum_k s_k^2] / n^2 by `num`-point Gauss-Legendre quadrature per axis.
        """
        nodes, weights = np.polynomial.legendre.leggauss(num)
        u, w = 0.5 * (nodes + 1.0), 0.5 * weights
        (a0, a1), (t0, t1) = self.alpha_range, self.tau_range
        alpha = (a0 + (a1 - a0) * u)[:, None, None, None]
        tau = (t0 + (t1 - t0) * u)[None, :, None, None]
        lam = laplacian_eigenvalues(self.n, self.basis, self.length)
        s2 = (self.sigma * self.n * tau ** (alpha - 1.0) * (lam + tau**2) ** (-alpha / 2.0)) ** 2
        s2 = np.where(_mean_mode(self.n, self.basis), 0.0, s2).sum(axis=(-2, -1)) / self.n**2
        return float(np.einsum("i,j,ij->", w, w, s2))


class ThresholdedGRF(eqx.Module):
    """Binary field: `high` where the latent GRF >= `threshold`, else `low` (Darcy: 12 / 3).

    The published Darcy prior thresholds a cosine GRF with alpha = 2, tau = 3 at 0,
    so each value has probability 1/2: mean 7.5, std 4.5.
    """

    base: GaussianRandomField
    high: float = eqx.field(static=True, default=12.0)
    low: float = eqx.field(static=True, default=3.0)
    threshold: float = eqx.field(static=True, default=0.0)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.base.shape

    @property
    def n(self) -> int:
        return self.base.n

    def latent(self, key) -> jnp.ndarray:
        return self.base.latent(key)

    def transform(self, latent: jnp.ndarray) -> jnp.ndarray:
        g = self.base.transform(latent)
        return jnp.where(g >= self.threshold, self.high, self.low).astype(g.dtype)

    def sample(self, key) -> jnp.ndarray:
        return self.transform(self.latent(key))


class SmoothGRF(eqx.Module):
    """The observation-pattern benchmark's condition field, `(1, n, n)`.

    White noise filtered in Fourier space by exp(-2 (pi l)^2 |m|^2), m the integer
    wavenumber (|k|^2 H W with k in cycles per sample), mean mode removed, then
    standardized per sample to mean 0 and std 1. l = 0.22 (smooth), 0.09 (medium),
    0.025 (rough). The per-sample standardization makes it non-Gaussian.
    """

    n: int = eqx.field(static=True)
    length_scale: float = eqx.field(static=True, default=0.22)

    def __check_init__(self):
        checks.positive("length_scale", self.length_scale)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, self.n, self.n)

    def latent(self, key) -> jnp.ndarray:
        return rng.normal(key, self.shape)

    def transform(self, latent: jnp.ndarray) -> jnp.ndarray:
        m = np.fft.fftfreq(self.n, d=1.0 / self.n)
        m2 = m[:, None] ** 2 + m[None, :] ** 2
        filt = np.exp(-2.0 * (np.pi * self.length_scale) ** 2 * m2)
        filt[0, 0] = 0.0
        g = jnp.fft.ifft2(jnp.fft.fft2(latent) * jnp.asarray(filt, latent.dtype)).real
        g = g - g.mean(axis=(-2, -1), keepdims=True)
        return (g / g.std(axis=(-2, -1), keepdims=True)).astype(latent.dtype)

    def sample(self, key) -> jnp.ndarray:
        return self.transform(self.latent(key))


def _squared_exponential_std(n: int, spacing: float, length) -> jnp.ndarray:
    """Per-mode std `(n,)` of the 1-D periodic covariance exp(-d^2 / l^2) with unit variance."""
    m = np.fft.fftfreq(n, d=1.0 / n)
    k = 2 * np.pi * m / (n * spacing)
    # covariance exp(-d^2 / l^2) has spectral density ~ exp(-k^2 l^2 / 4); std is its square root
    spec = jnp.exp(-0.125 * (k * length) ** 2)
    return spec / jnp.sqrt(jnp.sum(spec**2) / n)


class AnisotropicLogNormal(eqx.Module):
    """Log-normal field with per-sample mean, std and two correlation lengths.

    On the points `z` (rows) and `x` (columns) of a possibly non-uniform grid
    (e.g. the graded radial cells of the CO2 storage task): a unit-variance GRF
    with anisotropic squared-exponential covariance exp(-dz^2/lz^2 - dx^2/lx^2)
    is generated on a uniform, twice-padded periodic grid fine enough to resolve the
    shortest correlation length, bilinearly interpolated to the points, and
    exponentiated: K = exp(m + s g) with s^2 = ln(1 + std^2 / mean^2),
    m = ln(mean) - s^2 / 2, so E[K] = mean and Std[K] = std.

    Latent: ``{"xi": (nz_fft, nx_fft), "hyper": (4,)}`` standard normal; mean,
    std, lz, lx are uniform on their ranges via the normal CDF.
    """

    z: tuple[float, ...] = eqx.field(static=True, converter=lambda v: tuple(float(t) for t in v))
    x: tuple[float, ...] = eqx.field(static=True, converter=lambda v: tuple(float(t) for t in v))
    mean_range: tuple[float, float] = eqx.field(static=True, default=(10.0, 500.0))
    std_range: tuple[float, float] = eqx.field(static=True, default=(1.0, 500.0))
    length_z_range: tuple[float, float] = eqx.field(static=True, default=(14.0, 56.0))
    length_x_range: tuple[float, float] = eqx.field(static=True, default=(359.0, 35900.0))
    fft_shape: tuple[int, int] = eqx.field(static=True, default=(128, 2048))

    def __check_init__(self):
        for name in ("mean_range", "std_range", "length_z_range", "length_x_range"):
            _check_range(name, getattr(self, name))
        for name in ("z", "x"):
            pts = np.asarray(getattr(self, name))
            if pts.ndim != 1 or len(pts) < 2 or not np.all(np.diff(pts) > 0):
                raise ValueError(f"{name}: expected increasing 1-D coordinates, got shape {pts.shape}")
        for axis, (pts, nfft, lrange) in enumerate(
            (
                (self.z, self.fft_shape[0], self.length_z_range),
                (self.x, self.fft_shape[1], self.length_x_range),
            )
        ):
            extent = 2 * (pts[-1] - pts[0])
            if extent / nfft > 0.5 * lrange[0]:
                raise ValueError(
                    f"fft_shape: axis {axis} spacing {extent / nfft:.3g} does not resolve the shortest "
                    f"correlation length {lrange[0]}; got fft_shape={self.fft_shape}"
                )

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, len(self.z), len(self.x))

    def latent(self, key) -> dict:
        k_xi, k_h = jr.split(key)
        return {"xi": rng.normal(k_xi, self.fft_shape), "hyper": rng.normal(k_h, (4,))}

    def hyperparameters(self, latent: dict) -> dict:
        u = ndtr(latent["hyper"])
        ranges = (self.mean_range, self.std_range, self.length_z_range, self.length_x_range)
        vals = [lo + (hi - lo) * u[i] for i, (lo, hi) in enumerate(ranges)]
        return dict(zip(("mean", "std", "length_z", "length_x"), vals, strict=True))

    def gaussian(self, latent: dict) -> jnp.ndarray:
        """The unit-variance latent GRF on the target points `(nz, nx)`."""
        hp = self.hyperparameters(latent)
        z, x = np.asarray(self.z), np.asarray(self.x)
        nz, nx = self.fft_shape
        dz, dx = 2 * (z[-1] - z[0]) / nz, 2 * (x[-1] - x[0]) / nx
        s = (
            _squared_exponential_std(nz, dz, hp["length_z"])[:, None]
            * _squared_exponential_std(nx, dx, hp["length_x"])[None, :]
        )
        g = jnp.fft.ifft2(jnp.fft.fft2(latent["xi"], norm="ortho") * s, norm="ortho").real
        # bilinear interpolation from the uniform grid (origin at the first point) to the targets
        fz, fx = (z - z[0]) / dz, (x - x[0]) / dx
        iz, ix = np.minimum(np.floor(fz).astype(int), nz - 2), np.minimum(np.floor(fx).astype(int), nx - 2)
        wz, wx = jnp.asarray(fz - iz)[:, None], jnp.asarray(fx - ix)[None, :]
        g00, g01 = g[iz][:, ix], g[iz][:, ix + 1]
        g10, g11 = g[iz + 1][:, ix], g[iz + 1][:, ix + 1]
        return (1 - wz) * ((1 - wx) * g00 + wx * g01) + wz * ((1 - wx) * g10 + wx * g11)

    def transform(self, latent: dict) -> jnp.ndarray:
        hp = self.hyperparameters(latent)
        s2 = jnp.log1p((hp["std"] / hp["mean"]) ** 2)
        m = jnp.log(hp["mean"]) - 0.5 * s2
        return jnp.exp(m + jnp.sqrt(s2) * self.gaussian(latent))[None].astype(latent["xi"].dtype)

    def sample(self, key) -> jnp.ndarray:
        return self.transform(self.latent(key))


def is_gaussian(prior) -> bool:
    """True for priors with a closed-form Gaussian density and score."""
    return isinstance(prior, GaussianRandomField)


@eqx.filter_jit
def sample_batch(prior, key, num: int) -> jnp.ndarray:
    """`num` prior samples `(num, C, H, W)`, keys from `fold_in(key, i)` (one compiled program)."""
    return jax.vmap(lambda i: prior.sample(jr.fold_in(key, i)))(jnp.arange(num))
