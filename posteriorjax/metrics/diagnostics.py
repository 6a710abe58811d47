"""Physics diagnostics of generated samples: data consistency, PDE residuals, GRF smoothness.

These check a sample against the problem rather than against a reference
posterior: does it reproduce the observations within the noise, does a
predicted (coefficient, solution) pair satisfy the PDE, and does a generated
Gaussian-random-field sample have the prior's smoothness exponent.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posteriorjax import checks, grids

# ----------------------------------------------------------------------------
# Observation consistency


def observation_misfit(forward, samples, y_obs, noise_std):
    """Whitened data misfit of each sample, (1/M) ||(forward(x_i) - y_obs) / noise_std||^2 -> `(N,)`.

    `forward` maps one sample `(C, H, W)` to predicted observations `(M,)` (a
    task's `forward`), vmapped over `samples (N, C, H, W)`; `noise_std` is a
    scalar or `(M,)`. A sample consistent with the data gives about 1 (a
    posterior sample somewhat less, by the fraction of data fitted); values far
    above 1 are samples the observations rule out.
    """
    x = checks.ensemble(samples, "samples")
    y = jnp.asarray(y_obs, x.dtype)
    pred = jax.vmap(forward)(x)
    if pred.shape[1:] != y.shape:
        raise ValueError(f"y_obs: expected shape {pred.shape[1:]} (the output of forward), got {y.shape}")
    r = (pred - y) / jnp.asarray(noise_std, x.dtype)
    return jnp.mean(r**2, axis=1)


def finite_member(x: jax.Array) -> jax.Array:
    """The default validity of one member `x (C, H, W)`: every value finite (a boolean scalar)."""
    return jnp.all(jnp.isfinite(x))


def valid_members(valid, samples, fallback=None):
    """`(ok (N,), safe (N, ...))`: `valid` of each member, and the ensemble with invalid members replaced.

    `valid` maps one member to a boolean scalar (a task's `valid`). An invalid
    member is replaced by `fallback` (one member's shape, e.g. the true field)
    or, when None, by the first valid member, so a forward model run on `safe`
    only ever sees valid inputs -- unless no member is valid and no fallback is
    given. Mask what is computed from replaced members afterwards.
    """
    ok = jax.vmap(valid)(samples)
    if fallback is None:
        fallback = samples[jnp.argmax(ok)]
    mask = ok.reshape((-1,) + (1,) * (samples.ndim - 1))
    return ok, jnp.where(mask, samples, jnp.asarray(fallback, samples.dtype))


def observation_values(forward, samples, y_obs, noise_std, *, valid=None, fallback=None):
    """Data misfit of the members where the physics is defined (pure; jit/vmap-able).

    Args:
      forward: one member `(C, H, W)` -> predicted observations `(M,)` (a task's `forward`).
      samples: ensemble `(N, C, H, W)`. y_obs: `(M,)`. noise_std: scalar or `(M,)`.
      valid: one member -> boolean scalar (a task's `valid`); None = every value finite.
      fallback: a valid field `(C, H, W)` the forward model sees in place of an
        invalid member (see `valid_members`; None = the first valid member).

    Returns `{"obs_misfit": scalar, "num_invalid": int32 scalar}`: the mean over
    members of the whitened misfit (1/M) ||(forward(x_i) - y_obs) / noise_std||^2
    (`observation_misfit`), NaN when any member is invalid.
    """
    ok, safe = valid_members(finite_member if valid is None else valid, samples, fallback)
    misfit = observation_misfit(forward, safe, y_obs, noise_std)
    value = jnp.mean(jnp.where(ok, misfit, jnp.nan))
    return {"obs_misfit": value, "num_invalid": jnp.sum(~ok).astype(jnp.int32)}


def pde_residual(residual, x, u, *, scale=None):
    """Root-mean-square PDE residual of a predicted pair: sqrt(mean(residual(x, u)^2)).

    `residual(x, u)` is a physics module's residual function; with `scale`
    (e.g. the RMS of the source term) the value is divided by it to be unit-free.
    Vmap over pairs.
    """
    r = residual(x, u)
    rms = jnp.sqrt(jnp.mean(jnp.square(r)))
    return rms if scale is None else rms / scale


# ----------------------------------------------------------------------------
# GRF smoothness recovery


def _dct_basis(shape):
    h, w = shape
    ky, kx = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
    eig = jnp.pi**2 * (kx**2 + ky**2)
    mask = jnp.ones(shape, bool).at[0, 0].set(False)
    return (lambda f: jax.scipy.fft.dctn(f, type=2, norm="ortho", axes=(-2, -1))), eig, mask


def _dst_basis(shape):
    h, w = shape
    ky, kx = jnp.arange(1, h + 1)[:, None], jnp.arange(1, w + 1)[None, :]
    eig = jnp.pi**2 * (kx**2 + ky**2)
    return grids.dst1, eig, jnp.ones(shape, bool)


BASES = {"dct": _dct_basis, "dst": _dst_basis}


def grf_alpha_nll(coefficients, eigenvalues, mask, alpha, tau, *, fit_scale=True):
    """Negative log-likelihood (up to constants) of GRF coefficients under exponent `alpha`.

    Model: c_k ~ N(0, s^2 g_k(alpha)) independently on the modes in `mask`, with
    g_k = tau^(2(alpha - 1)) (lambda_k + tau^2)^(-alpha) (the FNO/DiffusionPDE
    GRF spectrum, lambda_k = pi^2 |k|^2). `fit_scale` profiles out s^2 by its
    maximum-likelihood value mean(c^2 / g); otherwise s^2 = H W, the scale of
    the reference generator.
    """
    logg = 2 * (alpha - 1) * jnp.log(tau) - alpha * jnp.log(eigenvalues + tau**2)
    c2 = jnp.where(mask, coefficients**2, 0.0)
    count = jnp.sum(mask)
    ratio = jnp.sum(jnp.where(mask, c2 * jnp.exp(-logg), 0.0))
    logdet = jnp.sum(jnp.where(mask, logg, 0.0))
    if fit_scale:
        s2 = ratio / count
        return 0.5 * (count * jnp.log(s2) + logdet + count)
    s2 = coefficients.size
    return 0.5 * (ratio / s2 + logdet + count * jnp.log(s2))


def estimate_grf_alpha(field, *, tau=3.0, basis="dct", alphas=None, fit_scale=True):
    """Maximum-likelihood smoothness exponent alpha of one GRF sample `field (H, W)` -> scalar.

    The field is mapped to the task's transform basis (``"dct"``: orthonormal
    DCT-II, the Neumann/FNO GRF; ``"dst"``: orthonormal DST-I, Dirichlet) where
    the GRF coefficients are independent Gaussians (`grf_alpha_nll`); the NLL
    is profiled on the grid `alphas` (default 0.5..6 in steps of 0.025) and the
    minimum refined by a parabola through its neighbours. Vmap over samples and
    channels. Compare with the prior's alpha to see whether a sampler recovers
    the prior's smoothness (too-smooth samples give larger alpha).
    """
    f = jnp.asarray(field)
    if f.ndim != 2:
        raise ValueError(f"field: expected one channel (H, W), got shape {f.shape}")
    checks.in_choices("basis", basis, sorted(BASES))
    transform, eig, mask = BASES[basis](f.shape)
    coef = transform(f)
    grid = jnp.linspace(0.5, 6.0, 221, dtype=f.dtype) if alphas is None else jnp.asarray(alphas, f.dtype)
    nll = jax.vmap(lambda a: grf_alpha_nll(coef, eig, mask, a, tau, fit_scale=fit_scale))(grid)
    # refine the grid minimum by the parabola through it and its two neighbours (an edge
    # minimum is moved in by one point so both exist); where the three points are not convex
    # the grid point stands, and the shift is capped at one grid step
    i = jnp.clip(jnp.argmin(nll), 1, grid.shape[0] - 2)
    y0, y1, y2 = nll[i - 1], nll[i], nll[i + 1]
    h = grid[i + 1] - grid[i]
    denom = y0 - 2 * y1 + y2
    shift = jnp.where(denom > 0, 0.5 * (y0 - y2) / jnp.where(denom > 0, denom, 1.0), 0.0)
    return grid[i] + jnp.clip(shift, -1.0, 1.0) * h
