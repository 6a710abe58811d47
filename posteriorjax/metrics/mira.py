"""MIRA: a score of conditional-distribution accuracy from one true sample per condition.

Sharief et al., "MIRA: A Score for Conditional Distribution Accuracy and Model
Comparison" (Sec. 3, Algorithm 1). For each of L conditions with true sample
y* and N candidate samples y_1..y_N (flat vectors `(d,)` or whole fields,
flattened):

1. Normalize to [0, 1] per dimension with the affine map from the per-dimension
   min and max over that condition's N candidates *and* its truth (a symmetric
   function of all N + 1 points, so it keeps them exchangeable under the null;
   a zero-width dimension gets width 1).
2. Draw R regions: centre c ~ U(0, 1)^d (or, with `center_anchors`,
   c = anchor + U(-0.05, 0.05)^d in the same normalized space, the
   condition-dependent centres of the paper's App. E.4); a reference point y_r
   drawn uniformly from the candidate's own samples and *excluded* from the
   count; radius r = ||c - y_r||; B = open ball B(c, r).
3. n = number of the N' = N - 1 remaining candidates inside B, k = 1[y* in B];
   statistic s = (n + 1) / (N' + 2) if k = 1 else (N' - n + 1) / (N' + 2)
   (Laplace's rule of succession).
4. Score = mean of s over regions and conditions.

`mira` scores L conditions at once; `condition_statistic` is step 4 for one
condition (for programs that handle one condition at a time).

Under a calibrated model y*, y_r and the counted candidates are exchangeable,
the mass of B under the candidate is U(0, 1), and the exact finite-N' moments
are E[s] = (2N' + 3) / (3 (N' + 2)) -> 2/3 and
Var[s] = (N' + 1) / (2 (N' + 2)) - E[s]^2 -> 1/18. Scores below the mean
indicate over-confidence or bias, above it under-confidence.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.metrics import _checks


class MiraResult(NamedTuple):
    """Result of `mira` (a pytree; every field a JAX scalar unless noted).

    score: mean MIRA statistic over regions and conditions.
    per_condition: `(L,)` mean statistic per condition.
    bootstrap_std: std of the score over bootstrap resamples of the conditions.
    expected_mean, expected_var: exact calibrated mean and variance of one
        statistic for N' = N - 1 counted candidates.
    standard_error: sqrt(expected_var / L), the calibrated uncertainty of the
        score (conservative: averaging R regions per condition only lowers it).
    z: (score - expected_mean) / standard_error.
    z_bootstrap: (score - expected_mean) / bootstrap_std.
    num_counted: N' = N - 1.
    """

    score: jnp.ndarray
    per_condition: jnp.ndarray
    bootstrap_std: jnp.ndarray
    expected_mean: jnp.ndarray
    expected_var: jnp.ndarray
    standard_error: jnp.ndarray
    z: jnp.ndarray
    z_bootstrap: jnp.ndarray
    num_counted: int


def expected_moments(num_counted: int):
    """Exact calibrated (mean, variance) of the MIRA statistic with N' = `num_counted` candidates."""
    n = num_counted
    mean = (2 * n + 3) / (3 * (n + 2))
    return mean, (n + 1) / (2 * (n + 2)) - mean**2


def condition_statistic(key, samples, truth, *, num_regions=100, center_anchor=None):
    """Mean MIRA statistic of one condition over `num_regions` regions -> scalar.

    `samples (N, d)` (or `(N, ...)`, flattened) are the N >= 2 candidates of
    one condition and `truth (d,)` (or `(...)`) its true sample; regions are
    drawn from `key` as in the module docstring (uniform centres, or
    `center_anchor (d,)` + U(-0.05, 0.05) in the normalized space). Pure and
    jit/vmap-able (shapes are checked when traced, values are not): NaN when
    any input value is non-finite. With `key = fold_in(split(k)[0], i)` it is
    `mira(k, ...).per_condition[i]`, so per-condition statistics computed
    separately (e.g. by a sweep, one condition per configuration) average to
    the `mira` score; `expected_moments(N - 1)` gives its calibrated mean and
    the variance of a single-region statistic.
    """
    x = jnp.asarray(samples)
    if x.ndim < 2:
        raise ValueError(f"samples: expected (N, d) or (N, ...), got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"samples: MIRA needs N >= 2 candidates (one is the reference), got {n}")
    x = x.reshape(n, -1)
    t = jnp.asarray(truth, x.dtype)
    if t.size != x.shape[1]:
        raise ValueError(f"truth: expected {x.shape[1]} elements (one sample), got shape {t.shape}")
    t = t.reshape(-1)
    anchored = center_anchor is not None
    a = t
    if anchored:
        a = jnp.asarray(center_anchor, x.dtype)
        if a.size != t.size:
            raise ValueError(f"center_anchor: expected {t.size} elements (one point), got shape {a.shape}")
        a = a.reshape(-1)
    stat = _condition_statistic(key, x, t, a, jnp.asarray(anchored), int(num_regions))
    finite = jnp.all(jnp.isfinite(x)) & jnp.all(jnp.isfinite(t)) & jnp.all(jnp.isfinite(a))
    return jnp.where(finite, stat, jnp.nan)


def _condition_statistic(key, samples, truth, anchor, anchored, num_regions):
    """`condition_statistic` on validated `samples (N, d)`, `truth (d,)`, `anchor (d,)` -> scalar."""
    n, d = samples.shape
    low = jnp.minimum(samples.min(axis=0), truth)
    width = jnp.maximum(samples.max(axis=0), truth) - low
    width = jnp.where(width > 0, width, 1.0)
    x = (samples - low) / width
    t = (truth - low) / width
    # one uniform draw per region: d centre coordinates and the reference index (cheaper to compile
    # than separate uniform and randint draws)
    u = jr.uniform(key, (num_regions, d + 1), x.dtype)
    centers = jnp.where(anchored, (anchor - low) / width + 0.1 * u[:, :d] - 0.05, u[:, :d])
    ref_index = jnp.minimum(jnp.floor(u[:, d] * n).astype(jnp.int32), n - 1)
    cc = jnp.sum(centers**2, axis=1)
    dx = (
        jnp.sum(x**2, axis=1)[None, :]
        + cc[:, None]
        - 2.0 * jnp.matmul(centers, x.T, precision=jax.lax.Precision.HIGHEST)
    )
    dt = jnp.sum((t[None, :] - centers) ** 2, axis=1)
    radius2 = jnp.take_along_axis(dx, ref_index[:, None], axis=1)[:, 0]
    counted = jnp.arange(n)[None, :] != ref_index[:, None]
    inside = jnp.sum((dx < radius2[:, None]) & counted, axis=1)
    k = dt < radius2
    m = n - 1
    stat = jnp.where(k, inside + 1, m - inside + 1) / (m + 2)
    return jnp.mean(stat)


def mira(
    key,
    samples,
    truth,
    *,
    num_regions=100,
    center_anchors=None,
    num_bootstrap=1000,
    batch_size=64,
) -> MiraResult:
    """MIRA score of candidate samples `(L, N, d)` (or `(L, N, ...)`) against truths `(L, d)` (or `(L, ...)`).

    See the module docstring for the construction. `center_anchors (L, d)`
    switches to condition-dependent centres (anchor + U(-0.05, 0.05) in the
    normalized space of each condition; anchors are in the data space). The
    per-condition randomness is `fold_in(key, condition index)`; the bootstrap
    resamples per-condition means with replacement (`num_bootstrap` times).
    Conditions are processed `batch_size` at a time (`jax.lax.map`), so memory
    is O(batch_size R N).
    """
    x = jnp.asarray(samples)
    if x.ndim < 3:
        raise ValueError(f"samples: expected (L, N, d) or (L, N, ...), got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    num_conditions, n = x.shape[:2]
    if n < 2:
        raise ValueError(
            f"samples: MIRA needs N >= 2 candidates per condition (one is the reference), got {n}"
        )
    x = x.reshape(num_conditions, n, -1)
    t = jnp.asarray(truth, x.dtype)
    if t.shape[0] != num_conditions or t.size != num_conditions * x.shape[2]:
        raise ValueError(
            f"truth: expected ({num_conditions}, ...) with {x.shape[2]} elements each, got {t.shape}"
        )
    t = t.reshape(num_conditions, -1)
    _checks.finite(x, "samples")
    _checks.finite(t, "truth")
    anchored = center_anchors is not None
    if anchored:
        a = jnp.asarray(center_anchors, x.dtype)
        if a.size != t.size:
            raise ValueError(f"center_anchors: expected {t.shape} (one point per condition), got {a.shape}")
        a = a.reshape(t.shape)
    else:
        a = t
    return _mira(key, x, t, a, jnp.asarray(anchored), num_regions, num_bootstrap, batch_size)


@functools.partial(jax.jit, static_argnums=(5, 6, 7))
def _mira(key, x, t, a, anchored, num_regions, num_bootstrap, batch_size):
    num_conditions, n = x.shape[:2]
    k_regions, k_boot = jr.split(key)
    keys = jax.vmap(lambda i: jr.fold_in(k_regions, i))(jnp.arange(num_conditions))
    # pad the conditions to whole batches (one compiled body, no remainder branch)
    batch = min(batch_size, num_conditions)
    pad = -num_conditions % batch
    padded = jax.tree.map(lambda v: jnp.concatenate([v, v[:pad]]) if pad else v, (keys, x, t, a))
    per_condition = jax.lax.map(
        lambda args: _condition_statistic(*args, anchored, num_regions),
        padded,
        batch_size=batch,
    )[:num_conditions]
    score = jnp.mean(per_condition)
    idx = jnp.floor(jr.uniform(k_boot, (num_bootstrap, num_conditions)) * num_conditions).astype(jnp.int32)
    idx = jnp.minimum(idx, num_conditions - 1)
    boot_std = jnp.std(jnp.mean(per_condition[idx], axis=1))
    mean, var = expected_moments(n - 1)
    se = (var / num_conditions) ** 0.5
    result = MiraResult(
        score=score,
        per_condition=per_condition,
        bootstrap_std=boot_std,
        expected_mean=jnp.asarray(mean, x.dtype),
        expected_var=jnp.asarray(var, x.dtype),
        standard_error=jnp.asarray(se, x.dtype),
        z=(score - mean) / se,
        z_bootstrap=(score - mean) / boot_std,
        num_counted=n - 1,
    )
    return _nan_result(result, x, t)


def _nan_result(result: MiraResult, x, t) -> MiraResult:
    arrays = {k: v for k, v in result._asdict().items() if k != "num_counted"}
    return result._replace(**_checks.nan_if_nonfinite(arrays, x, t))
