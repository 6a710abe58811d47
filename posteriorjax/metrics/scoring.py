"""Proper scoring rules for an ensemble against one true field.

CRPS per element (Gneiting & Raftery 2007; the per-case distributional
accuracy part of the pointwise-metrics protocol) and the energy score on whole
members. Ensembles are `samples (N, ...)` with optional weights `(N,)` (>= 0,
summing to 1; None = uniform) and `truth (...)` of the member shape.

Two estimators, named as in scoringrules >= 0.9:
  * ``"standard"`` (scoringrules ``"qd"``/``"nrg"``, properscoring): the score
    of the empirical (weighted) ensemble distribution,
    E|X - y| - 1/2 E|X - X'| with the double sum including i = j.
  * ``"fair"`` (scoringrules ``"fair"``/``"pwm"``): the spread term over i != j,
    divided by 1 - sum_i w_i^2 (N / (N - 1) for uniform weights); unbiased for
    the score of the distribution the members are drawn from. Needs N >= 2.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.metrics import ordering
from posteriorjax.metrics.posterior import squared_distances

ESTIMATORS = ("standard", "fair")


def _prepare(samples, truth, weights, estimator):
    checks.in_choices("estimator", estimator, ESTIMATORS)
    x = checks.ensemble(samples, "samples", min_size=2 if estimator == "fair" else 1, min_ndim=1)
    y = jnp.asarray(truth, x.dtype)
    if y.shape != x.shape[1:]:
        raise ValueError(
            f"truth: expected shape {x.shape[1:]} (one member of samples {x.shape}), got {y.shape}"
        )
    checks.finite(x, "samples")
    checks.finite(y, "truth")
    w = checks.weights(weights, x.shape[0], "weights", x.dtype)
    return x, y, w


CRPS_METHODS = ("auto", "pairwise", "sort")
# "auto" with weights uses the pairwise form up to this ensemble size: O(N^2) elementwise work
# against a sort carrying the weights (`argsort`), which XLA's CPU runs with a compiled
# comparator per comparison, slower at the suite's ensemble sizes. Equal weights sort the values
# alone by integer keys (`ordering.sort`), the same sort as the suite's quantiles
# (`calibration.weighted_quantiles`), which XLA then computes once. The timings:
# docs/studies/performance.md ("Sorts", "CRPS").
PAIRWISE_MAX_MEMBERS = 512


def crps(samples, truth, weights=None, *, estimator="standard", method="auto"):
    """Per-element CRPS of the ensemble `samples (N, ...)` at `truth (...)` -> `(...)`.

    CRPS(F, y) = int (F(t) - 1{t >= y})^2 dt for the weighted empirical F:

        CRPS = sum_i w_i |x_i - y| - 1/2 sum_ij w_i w_j |x_i - x_j|.

    ``method="pairwise"`` sums the spread term directly over the N(N-1)/2 pairs, one
    member offset at a time (O(N^2) elementwise work, no sort, O(N) memory per element);
    ``"sort"`` computes it in O(N log N) from the members sorted along N, weights
    w_(i) and their running sum C_i: sum_i w_(i) x_(i) (2 C_i - w_(i) - 1) (ties cancel).
    ``"auto"``: ``"sort"`` for equal weights (`ordering.sort`, no payload), else pairwise for
    N <= `PAIRWISE_MAX_MEMBERS`. Both agree to rounding.
    For N = 1 it is |x - y|, the MAE of a point estimate. See the module docstring
    for `estimator`.
    """
    checks.in_choices("method", method, CRPS_METHODS)
    x, y, w = _prepare(samples, truth, weights, estimator)
    if method == "auto":
        by_keys = weights is None and ordering.INTEGER_KEYS
        method = "pairwise" if x.shape[0] <= PAIRWISE_MAX_MEMBERS and not by_keys else "sort"
    return _crps(x, y, w, weights is None, estimator, method)


PAIRWISE_BLOCK = 2048  # elements per block: N x 2048 float32 members stay in cache


def _pairwise_spread(x, w):
    """1/2 sum_ij w_i w_j |x_i - x_j| over axis 0 of `x (N, ...)`, one member offset per scan step.

    Pair (i, i + k mod N) for k = 1 .. N // 2 covers every unordered pair once, the
    k = N / 2 pairs (even N) twice, so that step is halved: N^2 / 2 absolute differences.
    Elements go in blocks of `PAIRWISE_BLOCK` so that the N / 2 passes over the
    members hit cache (one pass over all elements misses it at 128^2; the timing:
    docs/studies/performance.md, "CRPS").
    """
    n = x.shape[0]
    flat = x.reshape(n, -1)  # XLA's CPU reduction over N is far slower on (N, 1, H, W)
    size = flat.shape[1]
    if size > PAIRWISE_BLOCK:
        blocks = -(-size // PAIRWISE_BLOCK)
        flat = jnp.pad(flat, ((0, 0), (0, blocks * PAIRWISE_BLOCK - size)))
        flat = flat.reshape(n, blocks, PAIRWISE_BLOCK).transpose(1, 0, 2)
        out = jax.lax.map(lambda b: _pairwise_block(b, w), flat).reshape(-1)[:size]
    else:
        out = _pairwise_block(flat, w)
    return out.reshape(x.shape[1:])


def _pairwise_block(flat, w):
    n = flat.shape[0]
    ext, wext = jnp.concatenate([flat, flat]), jnp.concatenate([w, w])

    def offset(acc, k):  # member i against member i + k (mod N)
        ww = w * jax.lax.dynamic_slice_in_dim(wext, k, n) * jnp.where(2 * k == n, 0.5, 1.0)
        other = jax.lax.dynamic_slice_in_dim(ext, k, n)
        return acc + jnp.sum(ww[:, None] * jnp.abs(flat - other), axis=0), None

    total, _ = jax.lax.scan(offset, jnp.zeros(flat.shape[1:], flat.dtype), jnp.arange(1, n // 2 + 1))
    return total


def _sorted_spread(x, w, uniform):
    if uniform and ordering.INTEGER_KEYS:
        # members sorted per element as `calibration.weighted_quantiles` sorts them (one sort
        # in the suite); sum_i x_(i) (2 i - 1 - N) / N^2 as one matrix-vector product
        n = x.shape[0]
        members = ordering.sort(x.reshape(n, -1), axis=0)
        i = np.arange(1, n + 1)
        coef = jnp.asarray((2 * i - 1 - n) / n**2, x.dtype)
        return jnp.matmul(coef, members, precision=jax.lax.Precision.HIGHEST).reshape(x.shape[1:])
    wb = w.reshape((-1,) + (1,) * (x.ndim - 1))
    if uniform:
        xs = jnp.sort(x, axis=0)
        ws = jnp.broadcast_to(wb, x.shape)
    else:
        order = jnp.argsort(x, axis=0)
        xs = jnp.take_along_axis(x, order, axis=0)
        ws = jnp.take(w, order)
    cum = jnp.cumsum(ws, axis=0)
    return jnp.sum(ws * xs * (2.0 * cum - ws - 1.0), axis=0)


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _crps(x, y, w, uniform, estimator, method):
    if method == "pairwise":  # on flat members: XLA's CPU reductions over N are far slower on (N, 1, H, W)
        flat = x.reshape(x.shape[0], -1)
        accuracy = jnp.sum(w[:, None] * jnp.abs(flat - y.ravel()), axis=0).reshape(y.shape)
        spread = _pairwise_spread(x, w)
    elif uniform and ordering.INTEGER_KEYS:
        flat = x.reshape(x.shape[0], -1)
        accuracy = jnp.sum(w[:, None] * jnp.abs(flat - y.ravel()), axis=0).reshape(y.shape)
        spread = _sorted_spread(x, w, uniform)
    else:
        wb = w.reshape((-1,) + (1,) * (x.ndim - 1))
        accuracy = jnp.sum(wb * jnp.abs(x - y), axis=0)
        spread = _sorted_spread(x, w, uniform)
    if estimator == "fair":  # no i = j pairs: the pair weights sum to 1 - sum_i w_i^2, not 1
        spread = spread / (1.0 - jnp.sum(w**2))
    return checks.nan_if_nonfinite(accuracy - spread, x)


def energy_score(samples, truth, weights=None, *, beta=1.0, estimator="standard"):
    """Energy score of whole members: sum_i w_i ||x_i - y||^beta - 1/2 sum_ij w_i w_j ||x_i - x_j||^beta.

    `samples (N, ...)` are flattened to vectors; 0 < beta < 2 keeps it strictly
    proper. ``"fair"`` drops i = j and divides by 1 - sum w_i^2
    (scoringrules ``es_ensemble(..., estimator="fair")``). Pairwise distances use
    the Gram form (N x N), so memory is O(N^2 + N D).
    """
    x, y, w = _prepare(samples, truth, weights, estimator)
    return _energy_score(x, y, w, float(beta), estimator)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _energy_score(x, y, w, beta, estimator):
    x2 = x.reshape(x.shape[0], -1)
    accuracy = w @ (jnp.linalg.norm(x2 - y.ravel(), axis=1) ** beta)
    d2 = squared_distances(x2, x2)
    d2 = d2 * (1.0 - jnp.eye(x2.shape[0], dtype=d2.dtype))  # the Gram form leaves round-off at i = j
    # sqrt has an infinite derivative at 0 (the diagonal, equal members): the inner where keeps
    # it off the differentiated path, or the gradient of the whole score would be NaN
    pair = jnp.where(d2 > 0, jnp.sqrt(jnp.where(d2 > 0, d2, 1.0)) ** beta, 0.0)
    spread = 0.5 * (w @ pair @ w)
    if estimator == "fair":
        spread = spread / (1.0 - jnp.sum(w**2))
    return checks.nan_if_nonfinite(accuracy - spread, x)
