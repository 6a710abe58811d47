"""Diffusion priors the score-based samplers share: learned EDM denoisers and the exact GRF oracle.

Every sampler works in *normalized units* x_n = (x - mean) / std per channel (`nn.Normalizer`),
with the forward process x_sigma = x_0 + sigma eps, eps ~ N(0, C_n) drawn by a noise generator
(`diffusion.WhiteNoise`, C_n = I, or `diffusion.GRFNoise`, C_n diagonal in a GRF basis).

Oracle prior. For a fixed-hyperparameter GRF prior x ~ N(0, C), C = T^-1 diag(s^2) T, and noise
covariance C_n = T^-1 diag(nu^2) T in the *same* orthonormal basis T, the exact denoiser is

    D(x, sigma) = E[x_0 | x_sigma = x] = C (C + sigma^2 C_n)^-1 x
                = T^-1 diag(s~^2 / (s~^2 + sigma^2 nu^2)) T x,     s~ = s / std,

closed form and diagonal (the score follows by Tweedie). Replacing a trained network by it
separates the sampler's own error from the error of the learned prior.

Joint (unknown, state) priors. A learned joint denoiser acts on the stack [x_n; u_n]. In
oracle mode the state is not diffused: the denoised state is the physics of the denoised
unknown, u_hat = physics(x_hat), i.e. the oracle conditions on the noisy unknown only. This is
what a perfectly trained joint prior gives when the state channel carries no extra information
about x; for the samplers it means the observation loss goes through the exact forward map.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks, diffusion, nn, random_fields

PRIORS = ("oracle", "learned")
NOISES = ("white", "grf", "rbf")
DENSE_ORACLE_MAX_SIZE = 4096  # grid values up to which the dense Gaussian oracle is built


class GaussianOracleDenoiser(eqx.Module):
    """Exact denoiser of a Gaussian N(m, C) under noise N(0, C_n), any C and C_n (dense, small grids).

        D(x, sigma) = m + C (C + sigma^2 C_n)^-1 (x - m) = m + L Q diag(l / (l + sigma^2)) Q^T L^-1 (x - m),

    with C_n = L L^T and L^-1 C L^-T = Q diag(l) Q^T (a generalized eigendecomposition, once),
    so each evaluation is two `(d, d)` matrix-vector products, d = C H W. Serves the oracle
    prior under noise that is not diagonal in the prior's basis (the published RBF noise) and
    the exact *posterior* denoiser of a linear-Gaussian task (its posterior mean and covariance).

    Attributes:
      mean: `(C, H, W)` in normalized units.
      left: L Q `(d, d)`;  right: Q^T L^-1 `(d, d)`;  eigenvalues: l `(d,)`.
    """

    mean: jax.Array
    left: jax.Array
    right: jax.Array
    eigenvalues: jax.Array

    @classmethod
    def build(cls, mean: np.ndarray, cov: np.ndarray, noise_cov: np.ndarray) -> GaussianOracleDenoiser:
        """From `mean (C, H, W)`, `cov (d, d)` and `noise_cov (d, d)` (normalized units, float64 here)."""
        mean = np.asarray(mean, np.float64)
        d = mean.size
        cov, noise_cov = np.asarray(cov, np.float64), np.asarray(noise_cov, np.float64)
        for name, m in (("cov", cov), ("noise_cov", noise_cov)):
            if m.shape != (d, d):
                raise ValueError(f"{name}: expected shape {(d, d)} to match mean {mean.shape}, got {m.shape}")
        chol = np.linalg.cholesky(noise_cov)
        inv = np.linalg.solve(chol, np.eye(d))
        lam, q = np.linalg.eigh(inv @ cov @ inv.T)  # float64: C may be near singular (smooth GRFs)
        dtype = jnp.result_type(float)
        return cls(
            jnp.asarray(mean, dtype),
            jnp.asarray(chol @ q, dtype),
            jnp.asarray(q.T @ inv, dtype),
            jnp.asarray(np.maximum(lam, 0.0), dtype),  # round-off leaves tiny negative l of a PSD C
        )

    @property
    def channels(self) -> int:
        return self.mean.shape[0]

    def __call__(self, x: jax.Array, sigma, *, key=None) -> jax.Array:
        del key
        r = (x - self.mean.astype(x.dtype)).reshape(-1)
        lam = self.eigenvalues.astype(x.dtype)
        shrink = lam / (lam + jnp.asarray(sigma, x.dtype) ** 2)
        out = self.left.astype(x.dtype) @ (shrink * (self.right.astype(x.dtype) @ r))
        return (self.mean.astype(x.dtype) + out.reshape(x.shape)).astype(x.dtype)


def _dense_prior_covariance(prior: random_fields.GaussianRandomField, scale: float) -> np.ndarray:
    """The prior's covariance `(n^2, n^2)` in normalized units (physical / `scale`), row-major."""
    d = prior.n * prior.n
    eye = jnp.eye(d, dtype=jnp.result_type(float)).reshape(d, 1, prior.n, prior.n)
    cols = jax.vmap(prior.cov_apply)(eye).reshape(d, d)
    return np.asarray(cols, np.float64) / scale**2


def dense_noise_covariance(noise, shape) -> np.ndarray:
    """C_n `(d, d)` of a noise generator on fields `shape = (C, H, W)` (small grids)."""
    d = int(np.prod(shape))
    eye = jnp.eye(d, dtype=jnp.result_type(float)).reshape(d, *shape)
    return np.asarray(jax.vmap(noise.covariance_apply)(eye).reshape(d, d), np.float64)


class OracleGRFDenoiser(eqx.Module):
    """Exact denoiser D(x_n, sigma) of a fixed GRF prior in normalized units (see module doc).

    Attributes:
      prior: `random_fields.GaussianRandomField` (fields `(1, n, n)`).
      noise: `WhiteNoise` or a `GRFNoise` in the prior's basis.
      scale: the normalizing std (physical = scale * normalized; the GRF mean is 0).
    """

    prior: random_fields.GaussianRandomField
    noise: eqx.Module
    scale: float = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.prior, random_fields.GaussianRandomField):
            raise ValueError(
                "prior: the oracle needs a fixed-hyperparameter GaussianRandomField, "
                f"got {type(self.prior).__name__}"
            )
        if isinstance(self.noise, diffusion.GRFNoise) and self.noise.basis != self.prior.basis:
            raise ValueError(
                f"noise: the oracle needs GRF noise in the prior's basis {self.prior.basis!r}, "
                f"got {self.noise.basis!r}"
            )

    @property
    def channels(self) -> int:
        return 1

    def multiplier(self, sigma, dtype) -> jax.Array:
        """s~^2 / (s~^2 + sigma^2 nu^2) per mode `(n, n)`."""
        n = self.prior.n
        s2 = (self.prior.mode_std() / self.scale).astype(dtype) ** 2
        # white noise is diagonal in every orthonormal basis (nu = 1); GRF noise in the prior's
        nu2 = jnp.ones((n, n), dtype) if isinstance(self.noise, diffusion.WhiteNoise) else None
        if nu2 is None:
            nu2 = self.noise.mode_std(n).astype(dtype) ** 2
        return s2 / (s2 + jnp.asarray(sigma, dtype) ** 2 * nu2)

    def __call__(self, x: jax.Array, sigma, *, key=None) -> jax.Array:
        del key
        c = random_fields.forward_transform(x, self.prior.basis) * self.multiplier(sigma, x.dtype)
        return random_fields.inverse_transform(c, self.prior.basis).astype(x.dtype)


class DiffusionPrior(eqx.Module):
    """A denoiser over normalized states with its normalizer and noise generator.

    Attributes:
      denoiser: `EDMDenoiser` or `OracleGRFDenoiser`; `denoiser(x_n, sigma) -> x0_n`.
      normalizer: per-channel normalizer of the diffused stack (unknown, or [unknown; state]).
      noise: the noise generator the denoiser was trained (or is exact) for.
      unknown_channels: C_x, the leading channels that are the unknown.
      joint: whether the stack carries the state channels after the unknown.
    """

    denoiser: eqx.Module
    normalizer: nn.Normalizer
    noise: eqx.Module
    unknown_channels: int = eqx.field(static=True)
    joint: bool = eqx.field(static=True)

    @property
    def channels(self) -> int:
        return self.normalizer.channels

    def denoise(self, x_n: jax.Array, sigma) -> jax.Array:
        return self.denoiser(x_n, sigma)

    def unknown(self, x_n: jax.Array) -> jax.Array:
        """Physical unknown `(C_x, H, W)` of a normalized stack."""
        return self.normalizer.denormalize(x_n)[: self.unknown_channels]

    def state(self, x_n: jax.Array) -> jax.Array:
        """Physical state channels `(C_u, H, W)` of a normalized joint stack."""
        return self.normalizer.denormalize(x_n)[self.unknown_channels :]


def _noise(name: str, basis: str | None):
    if name == "white":
        return diffusion.WhiteNoise()
    if name == "rbf":
        return diffusion.RBFNoise()
    return diffusion.GRFNoise() if basis is None else diffusion.GRFNoise(basis=basis)


def build_prior(task, prior: str, model, *, joint: bool, noise: str) -> DiffusionPrior:
    """The `DiffusionPrior` of a sampler: ``prior="oracle"`` (exact GRF) or ``"learned"`` (`model`).

    `noise` is ``"white"``, ``"grf"`` or ``"rbf"`` (the published FunDPS kernel,
    `diffusion.RBFNoise()`). Oracle GRF noise uses the prior's basis (alpha 2, tau 3) and the
    diagonal `OracleGRFDenoiser`; oracle RBF noise the dense `GaussianOracleDenoiser` (grids of
    at most `DENSE_ORACLE_MAX_SIZE` values). Learned models use the training default
    `GRFNoise()`, white or RBF noise: the noise they were trained with. With ``joint=True`` a
    learned model must denoise the (unknown, state) stack.
    """
    checks.in_choices("prior", prior, PRIORS)
    checks.in_choices("noise", noise, NOISES)
    cx = task.unknown_shape[0]
    x_norm = nn.field_normalizer(task)
    if prior == "oracle":
        if model is not None:
            raise ValueError("model: the oracle prior takes no network (pass prior='learned' with a model)")
        if not isinstance(task.prior, random_fields.GaussianRandomField):
            raise ValueError(
                f"prior: 'oracle' needs a fixed-hyperparameter GaussianRandomField prior; task "
                f"{task.name!r} has {type(task.prior).__name__} (pass prior='learned' and a model)"
            )
        gen = _noise(noise, task.prior.basis)
        scale = float(x_norm.std[0])
        if noise != "rbf":
            return DiffusionPrior(OracleGRFDenoiser(task.prior, gen, scale), x_norm, gen, cx, False)
        size = int(np.prod(task.unknown_shape))
        if size > DENSE_ORACLE_MAX_SIZE:
            raise ValueError(
                f"noise: the oracle under RBF noise is dense and needs at most {DENSE_ORACLE_MAX_SIZE} grid "
                f"values, task {task.name!r} has {size} (use noise='grf' or a learned prior)"
            )
        den = GaussianOracleDenoiser.build(
            np.zeros(task.unknown_shape),
            _dense_prior_covariance(task.prior, scale),
            dense_noise_covariance(gen, task.unknown_shape),
        )
        return DiffusionPrior(den, x_norm, gen, cx, False)
    if model is None:
        raise ValueError(f"model: prior='learned' needs a trained EDM denoiser for {task.name!r}, got None")
    if not isinstance(model, diffusion.EDMDenoiser):
        raise ValueError(f"model: expected a diffusion.EDMDenoiser, got {type(model).__name__}")
    expected = cx + task.state_shape[0] if joint else cx
    if model.channels != expected:
        kind = "joint (unknown, state)" if joint else "unknown-only"
        raise ValueError(f"model: expected a {kind} denoiser with {expected} channels, got {model.channels}")
    gen = _noise(noise, None)
    return DiffusionPrior(model, model.normalizer, gen, cx, joint)


def posterior_prior(task, y_obs) -> DiffusionPrior:
    """The exact *posterior*'s diffusion prior of a small linear-Gaussian task, white noise.

    Its denoiser (`GaussianOracleDenoiser`, normalized units) is that of N(m, S), the posterior
    of the GRF prior N(0, C) given y = A x + N(0, s^2 I): m = C A^T G^-1 y, S = C - C A^T G^-1 A C,
    G = A C A^T + s^2 I, with A the forward map's Jacobian (dense, `DENSE_ORACLE_MAX_SIZE`).
    Driven through an unguided integrator it must reproduce the posterior: the floor of a
    sampler's discretization error.
    """
    if not isinstance(task.prior, random_fields.GaussianRandomField):
        raise ValueError(
            f"task: needs a fixed-hyperparameter GaussianRandomField prior, got {type(task.prior).__name__}"
        )
    size = int(np.prod(task.unknown_shape))
    if size > DENSE_ORACLE_MAX_SIZE:
        raise ValueError(
            f"task: the dense posterior needs at most {DENSE_ORACLE_MAX_SIZE} grid values, got {size}"
        )
    x_norm = nn.field_normalizer(task)
    scale = float(x_norm.std[0])
    a = jax.jacfwd(lambda v: task.forward(v.reshape(task.unknown_shape)))(jnp.zeros(size))
    a = np.asarray(a, np.float64)
    c = _dense_prior_covariance(task.prior, 1.0)
    gain = c @ a.T @ np.linalg.inv(a @ c @ a.T + float(task.noise_std) ** 2 * np.eye(a.shape[0]))
    mean = (gain @ np.asarray(y_obs, np.float64)).reshape(task.unknown_shape)
    den = GaussianOracleDenoiser.build(mean / scale, (c - gain @ a @ c) / scale**2, np.eye(size))
    return DiffusionPrior(den, x_norm, diffusion.WhiteNoise(), task.unknown_shape[0], False)
