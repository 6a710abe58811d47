"""Noise generators for diffusion over fields: white noise, function-space (GRF) noise and the
exponential-kernel ("RBF") noise of the published FunDPS code.

A generator draws `eps (C, H, W)` (`sample(key, shape, dtype=None)`, default dtype JAX's float)
with (about) unit pointwise variance and exposes the
covariance it draws from: `covariance_apply` (C_n v: the preconditioner of function-space
guidance) and, where it is cheap, `precision_apply` (C_n^-1 v), which the score needs:
for x = x0 + sigma eps with eps ~ N(0, C_n), grad log p_sigma(x) = C_n^-1 (D(x, sigma) - x) / sigma^2.

`GRFNoise` is a Gaussian random field with the spectrum of `random_fields.GaussianRandomField`
(per-mode std ~ (lambda_k + tau^2)^(-alpha/2) in the cosine/sine/Fourier basis), rescaled to
unit pointwise variance on the grid it is drawn on. Its covariance is a trace-class operator
on functions, so a prior trained with it is defined on functions and the same generator
serves every resolution (the grid is read from the requested shape).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks, random_fields, rng


def _check_shape(shape) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3 or shape[1] != shape[2] or shape[1] < 2:
        raise ValueError(f"shape: expected a square field shape (C, n, n) with n >= 2, got {shape}")
    return shape


class WhiteNoise(eqx.Module):
    """i.i.d. N(0, 1) per grid value (C_n = I)."""

    def sample(self, key, shape, dtype=None) -> jax.Array:
        return rng.normal(key, tuple(shape), dtype)

    def covariance_apply(self, v: jax.Array) -> jax.Array:
        return v

    def precision_apply(self, v: jax.Array) -> jax.Array:
        return v


class GRFNoise(eqx.Module):
    """Function-space noise: each channel an independent GRF(alpha, tau) with unit pointwise variance.

    Attributes:
      alpha, tau: spectrum exponent and inverse length scale (see `random_fields`).
      basis: ``"fourier"`` (periodic, default: keeps the mean mode), ``"cosine"`` or ``"sine"``.
    """

    alpha: float = eqx.field(static=True, default=2.0)
    tau: float = eqx.field(static=True, default=3.0)
    basis: str = eqx.field(static=True, default="fourier")

    def __check_init__(self):
        checks.in_choices("basis", self.basis, random_fields.BASES)
        checks.positive("alpha", self.alpha)
        checks.positive("tau", self.tau)

    def mode_std(self, n: int) -> jax.Array:
        """Per-mode std `(n, n)` in the basis layout, normalized to unit pointwise variance.

        Unlike the prior GRFs, the mean mode is kept (its std is the lambda = 0 value),
        so the noise covariance is invertible and every mode is diffused.
        """
        lam = random_fields.laplacian_eigenvalues(n, self.basis)
        s = (lam + self.tau**2) ** (-self.alpha / 2.0)
        s = s / np.sqrt(np.sum(s**2) / n**2)
        return jnp.asarray(s, jnp.result_type(float))

    def sample(self, key, shape, dtype=None) -> jax.Array:
        c, n, _ = _check_shape(shape)
        xi = rng.normal(key, (c, n, n), dtype)
        c_hat = random_fields.forward_transform(xi, self.basis) * self.mode_std(n)
        return random_fields.inverse_transform(c_hat, self.basis).astype(xi.dtype)

    def covariance_apply(self, v: jax.Array) -> jax.Array:
        """C_n v for `v (..., n, n)`."""
        n = v.shape[-1]
        c_hat = random_fields.forward_transform(v, self.basis) * self.mode_std(n).astype(v.dtype) ** 2
        return random_fields.inverse_transform(c_hat, self.basis).astype(v.dtype)

    def precision_apply(self, v: jax.Array) -> jax.Array:
        """C_n^-1 v for `v (..., n, n)`."""
        n = v.shape[-1]
        # every mode std is > 0 (the mean mode is kept, `mode_std`), so C_n is invertible
        c_hat = random_fields.forward_transform(v, self.basis) / self.mode_std(n) ** 2
        return random_fields.inverse_transform(c_hat, self.basis).astype(v.dtype)


def _embedding_spectrum(h: int, w: int, scale: float) -> np.ndarray:
    """Eigenvalues `(2h, 2w)` of the circulant embedding of k(d) = exp(-d / (2 scale^2)).

    Grid points sit at (i / h, j / w), i < h, j < w (the published `get_fixed_coords`).
    """
    return _exponential_spectrum(h, w, 2.0 * scale**2, 1.0 / h, 1.0 / w, name="scale", value=scale)


def _exponential_spectrum(h, w, length, step_y, step_x, *, name, value) -> np.ndarray:
    """Eigenvalues `(2h, 2w)` of the circulant embedding of k(d) = exp(-d / length).

    The grid has spacings (step_y, step_x); the (h w)^2 covariance matrix is the top-left block
    of the block-circulant matrix on the (2h, 2w) torus whose first row holds k at the wrapped
    distances (Dietrich & Newsam 1997). `name`, `value`: the option named in the error.
    """
    dy = np.minimum(np.arange(2 * h), 2 * h - np.arange(2 * h)) * step_y
    dx = np.minimum(np.arange(2 * w), 2 * w - np.arange(2 * w)) * step_x
    row = np.exp(-np.hypot(dy[:, None], dx[None, :]) / length)
    lam = np.fft.fft2(row).real
    # the FFT of a PSD embedding still leaves eigenvalues of round-off size below 0: only a
    # clearly negative one means the embedding fails; the round-off ones are clipped to 0
    if lam.min() < -1e-10 * lam.max():
        raise ValueError(
            f"{name}: the circulant embedding of the kernel with {name} {value} on a {h} x {w} grid is "
            f"not positive semi-definite (min eigenvalue {lam.min():.3g}); use a smaller {name}"
        )
    return np.maximum(lam, 0.0)


def _embedding_sample(key, shape, lam: np.ndarray, dtype=None) -> jax.Array:
    """A draw `(C, H, W)` of `dtype` (default float) with the covariance whose circulant-embedding
    spectrum is `lam (2H, 2W)`."""
    c, h, w = shape
    dtype = jnp.result_type(float) if dtype is None else dtype
    # fft2 is unnormalized on the (2H, 2W) torus: 4 H W is its size
    root = jnp.sqrt(jnp.asarray(lam, dtype) / (4 * h * w))
    k_re, k_im = jr.split(key)
    normal = (rng.normal(k, (c, 2 * h, 2 * w), dtype) for k in (k_re, k_im))
    xi = jax.lax.complex(*normal)
    # a complex normal gives two independent draws (real and imaginary parts); the real one, cut
    # to the top-left H x W block of the torus, has the kernel's covariance on the grid
    return jnp.fft.fft2(root * xi).real[:, :h, :w]


class RBFNoise(eqx.Module):
    """The published FunDPS noise (`RBFKernel`): k(d) = exp(-d / (2 scale^2)) + nugget_std^2 [d = 0].

    d is the Euclidean distance between grid points at (i / H, j / W) (the unit square, not
    periodic); despite the name the kernel is exponential (Matern 1/2) with correlation length
    2 scale^2 (0.005 at the published scale 0.05), so the noise is near white below about
    128 x 128 (neighbour correlation exp(-1 / (2 scale^2 n))). The published code draws it by a
    dense Cholesky of the (H W)^2 matrix (with nugget eps^2, eps = 0.01); here it is drawn
    exactly by circulant embedding, O(H W log(H W)). Pointwise variance 1 + nugget_std^2.

    Attributes:
      scale: the kernel's `scale` (> 0); published 0.05.
      nugget_std: the published `eps` (>= 0), added as eps^2 to the diagonal; published 0.01.
    """

    scale: float = eqx.field(static=True, default=0.05)
    nugget_std: float = eqx.field(static=True, default=0.01)

    def __check_init__(self):
        checks.positive("scale", self.scale)  # the kernel length scale
        checks.positive("nugget_std", self.nugget_std, allow_zero=True)

    def sample(self, key, shape, dtype=None) -> jax.Array:
        shape = tuple(int(s) for s in shape)
        if len(shape) != 3 or min(shape[1:]) < 1:
            raise ValueError(f"shape: expected a field shape (C, H, W), got {shape}")
        c, h, w = shape
        k_field, k_nug = jr.split(key)
        field = _embedding_sample(k_field, shape, _embedding_spectrum(h, w, self.scale), dtype)
        return field + self.nugget_std * rng.normal(k_nug, (c, h, w), field.dtype)

    def covariance_apply(self, v: jax.Array) -> jax.Array:
        """C_n v for `v (..., H, W)`: the kernel matrix by the embedding's FFT, plus the nugget."""
        h, w = v.shape[-2:]
        lam = jnp.asarray(_embedding_spectrum(h, w, self.scale), v.dtype)
        # v zero-padded onto the (2H, 2W) torus: the top-left block of the circulant product is
        # the (non-periodic) kernel matrix times v
        pad = [(0, 0)] * (v.ndim - 2) + [(0, h), (0, w)]
        kv = jnp.fft.ifft2(lam * jnp.fft.fft2(jnp.pad(v, pad))).real[..., :h, :w]
        return (kv + self.nugget_std**2 * v).astype(v.dtype)

    def dense_covariance(self, h: int, w: int) -> np.ndarray:
        """The `(h w, h w)` covariance matrix, row-major grid order (small grids; tests and oracles)."""
        yy, xx = np.meshgrid(np.arange(h) / h, np.arange(w) / w, indexing="ij")
        pts = np.stack([yy.ravel(), xx.ravel()], axis=1)
        d = np.sqrt(np.sum((pts[:, None] - pts[None]) ** 2, axis=-1))
        return np.exp(-d / (2.0 * self.scale**2)) + self.nugget_std**2 * np.eye(h * w)


class MaternNoise(eqx.Module):
    """The published ECI base noise: a GP with the Matern nu = 1/2 kernel k(d) = exp(-d / lengthscale).

    The published code (`training_eci/flow.py`, `GPPrior`) draws it with gpytorch's
    `MaternKernel(nu=0.5)` (output scale 1) on the grid `linspace(0, 1, n)` per axis (spacing
    1 / (n - 1), both ends included), lengthscale 1e-3: neighbour correlation
    exp(-1 / ((n - 1) lengthscale)), 4e-4 at 128 x 128, so the noise is white in effect. Drawn
    here exactly by circulant embedding; unit pointwise variance.

    Attributes:
      lengthscale: the kernel length on the unit square (> 0); published 1e-3.
    """

    lengthscale: float = eqx.field(static=True, default=1e-3)

    def __check_init__(self):
        checks.positive("lengthscale", self.lengthscale)

    def _spectrum(self, h: int, w: int) -> np.ndarray:
        # linspace(0, 1, n) includes both ends: spacing 1 / (n - 1); a single point has none
        steps = (1.0 / max(h - 1, 1), 1.0 / max(w - 1, 1))
        return _exponential_spectrum(
            h, w, self.lengthscale, *steps, name="lengthscale", value=self.lengthscale
        )

    def sample(self, key, shape, dtype=None) -> jax.Array:
        shape = tuple(int(s) for s in shape)
        if len(shape) != 3 or min(shape[1:]) < 1:
            raise ValueError(f"shape: expected a field shape (C, H, W), got {shape}")
        return _embedding_sample(key, shape, self._spectrum(*shape[1:]), dtype)

    def covariance_apply(self, v: jax.Array) -> jax.Array:
        """C_n v for `v (..., H, W)` by the embedding's FFT."""
        h, w = v.shape[-2:]
        lam = jnp.asarray(self._spectrum(h, w), v.dtype)
        pad = [(0, 0)] * (v.ndim - 2) + [(0, h), (0, w)]  # as `RBFNoise.covariance_apply`
        return jnp.fft.ifft2(lam * jnp.fft.fft2(jnp.pad(v, pad))).real[..., :h, :w].astype(v.dtype)

    def dense_covariance(self, h: int, w: int) -> np.ndarray:
        """The `(h w, h w)` covariance matrix, row-major grid order (small grids; tests)."""
        yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
        pts = np.stack([yy.ravel(), xx.ravel()], axis=1)
        return np.exp(-np.sqrt(np.sum((pts[:, None] - pts[None]) ** 2, axis=-1)) / self.lengthscale)


NOISES = {"white": WhiteNoise, "grf": GRFNoise, "rbf": RBFNoise, "matern": MaternNoise}


def get(name: str, **options):
    """Noise generator by name: ``"white"``, ``"grf"`` (options: alpha, tau, basis), ``"rbf"``
    (options: scale, nugget_std) or ``"matern"`` (option: lengthscale)."""
    checks.in_choices("noise", name, sorted(NOISES))
    return NOISES[name](**options)
