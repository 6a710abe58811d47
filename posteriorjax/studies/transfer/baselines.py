"""Classical baselines of the transfer experiment: Gaussian RBF interpolation and gappy POD.

Both follow the learned models' interface (`transfer.models`):
`fit_views(key, name, inputs (V, N, 2, H, W), targets (N, C_out, H, W), *, config, dataset)`
returns the V per-training-view models as one pytree, and
`predict(models, inputs (N, 2, H, W)) -> (V, N, C_out, H, W)`. Inputs are
`data.view_inputs`: the observed field with zeros where hidden, and the mask.
Neither baseline learns from masked inputs; what a training view selects is
its hyperparameters (a grid search on held-out training records observed
under that view), so the nine rows of a baseline's matrix differ only through
them. `key` is unused (both fits are deterministic).

**Gaussian RBF interpolation** (per record, from its own observed cells):
with k(d) = exp(-d^2 / (2 l^2)) (d in grid cells; summed over periodic images)
and y-bar the mean of the observed values, solve

    (M K M + ridge M + (I - M)) alpha = M (y - y-bar),   u = y-bar + K M alpha,

M the diagonal mask, by conjugate gradients (lineax) with the separable
kernel applied as K v = K_1 v K_1^T; observed cells keep their observed values.
`ridge` is dimensionless (noise-to-signal variance ratio), l is selected from
`length_scales` (domain units, times the resolution in cells).

**Gappy POD**: a POD basis (mean mu, orthonormal modes Phi, coefficient
variances lambda_i = s_i^2 / (N - 1)) of the training snapshots; per record the
coefficients solve the regularized least squares on the observed entries

    (Phi_o^T M Phi_o + sigma^2 Lambda^-1) c = Phi_o^T M (y - mu_o),

sigma^2 = noise * sum(lambda) / D (noise relative to the mean per-entry
variance), with the rank and `noise` selected per training view.

**Forecasting**: the snapshots are the joint states [frame 0, frames 1..3]
(D = 4 H W); gappy POD fits c on the observed frame-0 entries of the frame-0
block of the basis and predicts frames 1..3 as mu_t + Phi_t c. The RBF
baseline interpolates frame 0, then maps it to frames 1..3 with the same joint
basis fitted on every frame-0 entry (rank `propagator_rank`, relative noise
selected from `propagator_noises` with the length scale). `dataset` is the
family's `data.Dataset`; its training split (in order) must be the N records
of `inputs` and `targets` (its frame 0 completes the joint snapshots).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np

from posteriorjax.metrics import posterior

MODELS = ("rbf", "gappy_pod")
DEFAULTS = {
    "rbf": {
        "length_scales": (0.05, 0.1, 0.2),  # domain units (x resolution = cells)
        "ridge": 1e-2,
        "cg_rtol": 1e-5,
        "cg_max_steps": 300,
        "fit_records": 32,
        "propagator_rank": 64,
        "propagator_noises": (1e-3, 1e-2, 1e-1),
    },
    "gappy_pod": {
        "ranks": (4, 8, 16, 32, 64),
        "noises": (1e-4, 1e-3, 1e-2, 1e-1),
        "fit_records": 32,
    },
}


class PODBasis(eqx.Module):
    """POD of snapshots `(N, D)`: mean `(D,)`, orthonormal modes `(D, R)`, coefficient variances `(R,)`."""

    mean: jax.Array
    modes: jax.Array
    variance: jax.Array


class GappyPOD(eqx.Module):
    """V gappy-POD models sharing one basis; `rank (V,)` and relative `noise (V,)` per training view."""

    basis: PODBasis
    rank: jax.Array
    noise: jax.Array
    channels: int = eqx.field(static=True)
    forecast: bool = eqx.field(static=True)


class RBFInterpolation(eqx.Module):
    """V Gaussian RBF interpolators; `length (V,)` in grid cells per training view.

    `propagator` (forecasting only) maps an interpolated frame 0 to frames 1..3
    with relative noise `propagator_noise (V,)`.
    """

    length: jax.Array
    propagator_noise: jax.Array
    propagator: PODBasis | None
    ridge: float = eqx.field(static=True)
    periodic: bool = eqx.field(static=True)
    cg_rtol: float = eqx.field(static=True)
    cg_max_steps: int = eqx.field(static=True)
    propagator_rank: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)


# ----------------------------------------------------------------------------
# POD and gappy least squares


def pod(snapshots: np.ndarray, rank: int) -> PODBasis:
    """POD basis of `snapshots (N, D)` (float64 SVD of the centred snapshots), at most `rank` modes."""
    x = np.asarray(snapshots, np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"snapshots: expected (N >= 2, D), got shape {x.shape}")
    mean = x.mean(axis=0)
    _, s, vt = np.linalg.svd(x - mean, full_matrices=False)
    r = min(int(rank), s.size)
    variance = s[:r] ** 2 / (x.shape[0] - 1)
    dtype = jnp.result_type(float)
    return PODBasis(jnp.asarray(mean, dtype), jnp.asarray(vt[:r].T, dtype), jnp.asarray(variance, dtype))


def _gappy_coefficients(basis: PODBasis, rank, noise, y, m):
    """Coefficients `(R,)` from values `y (P,)` on mask `m (P,)` of the first P rows of the basis."""
    p = y.shape[0]
    r = basis.modes.shape[1]
    active = (jnp.arange(r) < rank).astype(y.dtype)
    phi = basis.modes[:p] * active
    lam = jnp.maximum(basis.variance, jnp.finfo(y.dtype).tiny)
    sigma2 = noise * jnp.sum(basis.variance) / basis.modes.shape[0]
    a = phi.T @ (m[:, None] * phi) + jnp.diag(active * sigma2 / lam + (1.0 - active))
    rhs = phi.T @ (m * (y - basis.mean[:p]))
    return active * jnp.linalg.solve(a, rhs)


def _gappy_one(basis: PODBasis, rank, noise, x, channels: int):
    """One record `x (2, H, W)` -> target `(channels, H, W)` (the last `channels` H W rows of the basis)."""
    h, w = x.shape[1:]
    c = _gappy_coefficients(basis, rank, noise, x[0].ravel(), x[1].ravel())
    out = basis.mean[-channels * h * w :] + basis.modes[-channels * h * w :] @ c
    return out.reshape(channels, h, w)


# ----------------------------------------------------------------------------
# RBF interpolation


def _kernel_1d(n: int, length, periodic: bool):
    """Gaussian kernel matrix `(n, n)`; periodic: summed over the images d + k n, |k| <= 3 (so SPD)."""
    i = jnp.arange(n)
    d = (i[:, None] - i[None, :]).astype(jnp.result_type(float))
    if not periodic:
        return jnp.exp(-0.5 * (d / length) ** 2)
    shifts = n * jnp.arange(-3, 4)
    return jnp.sum(jnp.exp(-0.5 * ((d[..., None] + shifts) / length) ** 2), axis=-1)


def rbf_interpolate(x, length, *, ridge: float, periodic: bool, rtol: float, max_steps: int):
    """Interpolate one record `x (2, H, W)` (values, mask) -> `(H, W)`; `length` in grid cells."""
    y, m = x[0], x[1]
    ky = _kernel_1d(y.shape[0], length, periodic).astype(y.dtype)
    kx = _kernel_1d(y.shape[1], length, periodic).astype(y.dtype)

    def apply(v):
        return ky @ v @ kx.T

    ybar = jnp.sum(y * m) / jnp.maximum(jnp.sum(m), 1.0)
    operator = lx.FunctionLinearOperator(
        lambda v: m * apply(m * v) + ridge * m * v + (1.0 - m) * v,
        jax.ShapeDtypeStruct(y.shape, y.dtype),
        tags=lx.positive_semidefinite_tag,
    )
    solver = lx.CG(rtol=rtol, atol=0.0, max_steps=max_steps)
    alpha = lx.linear_solve(operator, m * (y - ybar), solver, throw=False).value
    return jnp.where(m > 0, y, ybar + apply(m * alpha))


def _rbf_one(models: RBFInterpolation, length, noise, x):
    field = rbf_interpolate(
        x,
        length,
        ridge=models.ridge,
        periodic=models.periodic,
        rtol=models.cg_rtol,
        max_steps=models.cg_max_steps,
    )
    if models.propagator is None:
        return field[None]
    full = jnp.stack([field, jnp.ones_like(field)])
    return _gappy_one(models.propagator, models.propagator_rank, noise, full, models.channels)


# ----------------------------------------------------------------------------
# Interface


def _check_inputs(inputs, name: str = "inputs") -> jax.Array:
    inputs = jnp.asarray(inputs)
    if inputs.ndim != 4 or inputs.shape[1] != 2:
        raise ValueError(f"{name}: expected (N, 2, H, W) (masked field, mask), got shape {inputs.shape}")
    return inputs


@eqx.filter_jit
def _predict(models, inputs):
    if isinstance(models, GappyPOD):

        def per_view(rank, noise):
            return jax.vmap(lambda x: _gappy_one(models.basis, rank, noise, x, models.channels))(inputs)

        return jax.vmap(per_view)(models.rank, models.noise)

    def per_view_rbf(length, noise):
        return jax.vmap(lambda x: _rbf_one(models, length, noise, x))(inputs)

    return jax.vmap(per_view_rbf)(models.length, models.propagator_noise)


def predict(models: GappyPOD | RBFInterpolation, inputs) -> jax.Array:
    """Predictions `(V, N, C_out, H, W)` of every training view's model on `inputs (N, 2, H, W)`.

    Views whose selected hyperparameters coincide share one computation.
    """
    if not isinstance(models, (GappyPOD, RBFInterpolation)):
        raise ValueError(f"models: expected a GappyPOD or RBFInterpolation, got {type(models).__name__}")
    inputs = _check_inputs(inputs)
    if isinstance(inputs, jax.core.Tracer):
        return _predict(models, inputs)
    if isinstance(models, GappyPOD):
        where = lambda m: (m.rank, m.noise)  # noqa: E731
    else:
        where = lambda m: (m.length, m.propagator_noise)  # noqa: E731
    params = where(models)
    table = np.stack([np.asarray(p, np.float64) for p in params], axis=1)
    unique, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    if len(unique) == len(table):
        return _predict(models, inputs)
    distinct = eqx.tree_at(where, models, tuple(p[first] for p in params))
    return _predict(distinct, inputs)[np.asarray(inverse).ravel()]


def _options(name: str, config) -> dict:
    options = dict(DEFAULTS[name])
    given = {} if config is None else dict(config)
    unknown = sorted(set(given) - set(options))
    if unknown:
        raise ValueError(f"config: {name!r} takes {sorted(options)}, got unknown {unknown}")
    options.update(given)
    return options


def _holdout(num: int, fit_records: int) -> np.ndarray:
    """Evenly spaced held-out indices (records are in regime blocks, so every regime is represented)."""
    k = max(1, min(int(fit_records), num // 2))
    return np.unique(np.floor((np.arange(k) + 0.5) * num / k).astype(np.int64))


def _snapshots(targets: np.ndarray, dataset, forecast: bool) -> np.ndarray:
    n = targets.shape[0]
    if not forecast:
        return targets.reshape(n, -1)
    return np.concatenate([np.asarray(dataset.observed).reshape(n, -1), targets.reshape(n, -1)], axis=1)


def _selection_error(models, inputs, targets):
    """Mean held-out relative L2 `(V,)` of one candidate (V = 1) on each view's inputs `(V, N, 2, H, W)`."""
    pred = jax.vmap(lambda x: predict(models, x)[0])(inputs)  # (V, N, C, H, W)
    return np.asarray(jnp.mean(jax.vmap(posterior.relative_l2, (0, None))(pred, targets), axis=-1))


def fit_views(key, model_name: str, inputs, targets, *, config=None, dataset=None):
    """Fit V per-view baselines on `inputs (V, N, 2, H, W)` and `targets (N, C_out, H, W)`.

    Hyperparameters are selected per view on `fit_records` evenly spaced
    held-out training records (basis/propagator from the others), then the
    basis is refitted on all N records. Returns `GappyPOD` or `RBFInterpolation`.
    """
    del key
    if model_name not in MODELS:
        raise ValueError(f"model_name: expected one of {MODELS}, got {model_name!r}")
    inputs = jnp.asarray(inputs)
    targets = np.asarray(targets)
    if inputs.ndim != 5 or inputs.shape[2] != 2:
        raise ValueError(f"inputs: expected (V, N, 2, H, W), got shape {inputs.shape}")
    v, n, _, h, w = inputs.shape
    if targets.ndim != 4 or targets.shape[0] != n or targets.shape[2:] != (h, w):
        raise ValueError(f"targets: expected ({n}, C_out, {h}, {w}), got shape {targets.shape}")
    train = None if dataset is None else dataset.train
    if train is None or train.num_records != n:
        got = None if train is None else train.num_records
        raise ValueError(f"dataset: expected {n} training records (the rows of inputs), got {got}")
    forecast = bool(dataset.forecast)
    channels = targets.shape[1]
    options = _options(model_name, config)
    held = _holdout(n, options["fit_records"])
    rest = np.setdiff1d(np.arange(n), held)
    snapshots = _snapshots(targets, train, forecast)
    held_inputs, held_targets = inputs[:, held], jnp.asarray(targets[held])

    if model_name == "gappy_pod":
        ranks, noises = tuple(options["ranks"]), tuple(options["noises"])
        basis = pod(snapshots[rest], max(ranks))
        grid = [(r, s) for r in ranks for s in noises]
        errors = np.stack(
            [
                _selection_error(
                    GappyPOD(basis, jnp.full((1,), r), jnp.full((1,), s), channels, forecast),
                    held_inputs,
                    held_targets,
                )
                for r, s in grid
            ]
        )  # (candidates, V)
        best = np.argmin(errors, axis=0)
        return GappyPOD(
            pod(snapshots, max(ranks)),
            jnp.asarray([grid[i][0] for i in best]),
            jnp.asarray([grid[i][1] for i in best], jnp.result_type(float)),
            channels,
            forecast,
        )

    def build(candidates, propagator):
        dtype = jnp.result_type(float)
        return RBFInterpolation(
            jnp.asarray([c[0] for c in candidates], dtype),
            jnp.asarray([c[1] for c in candidates], dtype),
            propagator,
            float(options["ridge"]),
            forecast,
            float(options["cg_rtol"]),
            int(options["cg_max_steps"]),
            int(options["propagator_rank"]),
            channels,
        )

    rank = int(options["propagator_rank"])
    propagator = pod(snapshots[rest], rank) if forecast else None
    noises = tuple(options["propagator_noises"]) if forecast else (0.0,)
    grid = [(float(s) * h, p) for s in options["length_scales"] for p in noises]
    errors = np.stack([_selection_error(build([c], propagator), held_inputs, held_targets) for c in grid])
    best = np.argmin(errors, axis=0)
    return build([grid[i] for i in best], pod(snapshots, rank) if forecast else None)
