"""Calibration: coverage curves, split-conformal recalibration, marginal fidelity, TARP, SBC.

Per-case quantities take `samples (N, ...)` and `truth (...)`; population-level
quantities take `samples (L, N, ...)` and `truth (L, ...)` over L cases
(conditions). The coverage, conformal and marginal-fidelity parts are the
calibration and population-level parts of the three-part protocol of
"Pointwise metrics mislead" (CRPS is in `scoring`); TARP follows Lemos et al.
(2023) and the `tarp` package without its known flaws (see `tarp`); SBC ranks
follow Talts et al. (2018) on random 1-D projections.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks
from posteriorjax.metrics import ordering
from posteriorjax.metrics.posterior import wasserstein_1d

DEFAULT_LEVELS = tuple(np.round(np.arange(0.05, 0.951, 0.05), 2).tolist())
# `coverage(method="auto")` counts (no sort) for equal weights; False restores the sorted
# quantiles (benchmark baseline). Read when a program is traced.
COVERAGE_BY_COUNTING = True


# ----------------------------------------------------------------------------
# Central-interval coverage


def weighted_quantiles(samples, probs, weights=None):
    """Quantiles `(K, ...)` of `samples (N, ...)` along N at probabilities `probs (K,)`.

    Piecewise-linear inverse of the weighted empirical CDF through the plotting
    positions p_i = C_i - w_(i) / 2 (C the running sum of sorted weights); for
    uniform weights p_i = (i - 1/2) / N, NumPy's ``method="hazen"``. Clamped to
    the sample range outside [p_1, p_N]. Equal weights (None) sort the values alone
    (`ordering.sort`; the weights need no reordering), others carry them by `argsort`.
    """
    x = jnp.asarray(samples)
    n = x.shape[0]
    w = jnp.full((n,), 1.0 / n, x.dtype) if weights is None else jnp.asarray(weights, x.dtype)
    probs = jnp.asarray(probs, x.dtype)
    if weights is None and ordering.INTEGER_KEYS:
        pos = jnp.cumsum(w) - 0.5 * w
        members = ordering.sort(x.reshape(n, -1), axis=0)  # the sort `scoring.crps` makes too
        q = jax.vmap(lambda col: jnp.interp(probs, pos, col), in_axes=1, out_axes=1)(members)
        return q.reshape((probs.shape[0],) + x.shape[1:])
    flat = x.reshape(n, -1).T

    def one(col):
        order = jnp.argsort(col)
        ws = w[order]
        pos = jnp.cumsum(ws) - 0.5 * ws
        return jnp.interp(probs, pos, col[order])

    q = jax.vmap(one)(flat)
    return q.T.reshape((probs.shape[0],) + x.shape[1:])


def check_levels(levels, name: str = "levels") -> tuple[float, ...]:
    """`levels` as a non-empty tuple of floats, each strictly inside (0, 1) (ValueError otherwise)."""
    if isinstance(levels, str):
        raise ValueError(f"{name}: expected numbers in (0, 1), got {levels!r}")
    if checks.is_traced(levels):
        raise TypeError(f"{name}: expected static numbers, got a traced value")
    values = np.ravel(np.asarray(levels, dtype=object))
    if values.size == 0:
        raise ValueError(f"{name}: expected at least one level in (0, 1), got {levels!r}")
    return tuple(checks.open_unit(name, v) for v in values)


def central_intervals(samples, levels=DEFAULT_LEVELS, weights=None):
    """Per-element central credible intervals: `(lo, hi)`, each `(K, ...)`.

    lo, hi are the (1 - l)/2 and (1 + l)/2 quantiles (`weighted_quantiles`) for
    each nominal level l in `levels`.
    """
    levels = jnp.asarray(levels)
    q = weighted_quantiles(samples, jnp.concatenate([(1 - levels) / 2, (1 + levels) / 2]), weights)
    k = levels.shape[0]
    return q[:k], q[k:]


def coverage(samples, truth, levels=DEFAULT_LEVELS, weights=None, *, method="auto"):
    """Empirical coverage `(K,)`: fraction of elements whose truth lies in the central l-interval.

    `samples (N, ...)`, `truth (...)`; averaged over all elements of the case.
    Vmap over cases and average for a population coverage curve. The interval is
    [q((1 - l)/2), q((1 + l)/2)] of `weighted_quantiles`. ``method="sort"`` builds
    the quantiles; ``"count"`` (equal weights only) inverts the piecewise-linear q
    at the truth from counts and the neighbouring members (`_counted_positions`), no
    sort; ``"auto"`` counts when `weights` is None (and `COVERAGE_BY_COUNTING`). Both give
    the same intervals, except that for a truth equal to a member at a node p_k the
    sorted path's `jnp.interp` may round q(p_k) = x_(k-1) + (x_(k) - x_(k-1)) below
    x_(k) and miss it; counting is exact.
    """
    if method not in ("auto", "count", "sort"):
        raise ValueError(f"method: expected 'auto', 'count' or 'sort', got {method!r}")
    if method == "count" and weights is not None:
        raise ValueError("method: 'count' needs equal weights (weights=None); use 'sort' or 'auto'")
    x = checks.ensemble(samples, "samples", min_size=2, min_ndim=1)
    t = jnp.asarray(truth, x.dtype)
    if t.shape != x.shape[1:]:
        raise ValueError(f"truth: expected shape {x.shape[1:]}, got {t.shape}")
    checks.finite(x, "samples")
    w = None if weights is None else checks.weights(weights, x.shape[0], "weights", x.dtype)
    levels = check_levels(levels)
    if w is None and (method == "count" or (method == "auto" and COVERAGE_BY_COUNTING)):
        return _coverage_counted(x, t, levels)
    return _coverage(x, t, levels, w)


@functools.partial(jax.jit, static_argnums=2)
def _coverage(x, t, levels, w):
    lo, hi = central_intervals(x, levels, w)
    inside = (lo <= t) & (t <= hi)
    cov = inside.reshape(inside.shape[0], -1).mean(axis=1)
    return checks.nan_if_nonfinite(cov, x)


def _counted_positions(x, t):
    """`(P, Q)`, each `(...)`: q(p) <= t iff p <= P, and q(p) >= t iff p >= Q, for equal weights.

    q is the piecewise-linear quantile through (p_i, x_(i)), p_i the plotting positions
    of `weighted_quantiles` (built the same way, so ties land on the same p_i). With
    k = #{x_i <= t} and a < t <= b the neighbouring members, P = p_k + (t - a) / (b - a)
    (p_(k+1) - p_k) (+inf if k = N, -inf if k = 0); Q likewise with k = #{x_i < t}.
    """
    n = x.shape[0]
    wn = jnp.full((n,), 1.0 / n, x.dtype)
    pos = jnp.cumsum(wn) - 0.5 * wn
    inf = jnp.asarray(jnp.inf, x.dtype)

    def invert(count, below, above, exact_below, exact_above):
        k0, k1 = jnp.clip(count - 1, 0, n - 1), jnp.clip(count, 0, n - 1)
        gap = jnp.where(above > below, above - below, 1.0)
        frac = jnp.where(exact_below, 0.0, jnp.where(exact_above, 1.0, (t - below) / gap))
        p = pos[k0] + frac * (pos[k1] - pos[k0])
        p = jnp.where(exact_above, pos[k1], p)
        return jnp.where(count == 0, -inf, jnp.where(count == n, inf, p))

    le, lt = x <= t, x < t
    big = jnp.asarray(jnp.finfo(x.dtype).max, x.dtype)
    # P: a = max{x <= t}, b = min{x > t}
    a = jnp.max(jnp.where(le, x, -big), axis=0)
    b = jnp.min(jnp.where(le, big, x), axis=0)
    upper = invert(jnp.sum(le, axis=0), a, b, a == t, jnp.zeros_like(le[0]))
    # Q: a = max{x < t}, b = min{x >= t}
    a = jnp.max(jnp.where(lt, x, -big), axis=0)
    b = jnp.min(jnp.where(lt, big, x), axis=0)
    lower = invert(jnp.sum(lt, axis=0), a, b, jnp.zeros_like(lt[0]), b == t)
    return upper, lower


@functools.partial(jax.jit, static_argnums=2)
def _coverage_counted(x, t, levels):
    # flat members: XLA's CPU reductions over N are far slower on (N, 1, H, W)
    upper, lower = _counted_positions(x.reshape(x.shape[0], -1), t.ravel())
    lv = jnp.asarray(levels)[:, None]  # the probabilities rounded as in `central_intervals`
    inside = (((1 - lv) / 2).astype(x.dtype) <= upper) & (lower <= ((1 + lv) / 2).astype(x.dtype))
    cov = inside.reshape(inside.shape[0], -1).mean(axis=1)
    return checks.nan_if_nonfinite(cov, x)


def calibration_error(cov, levels=DEFAULT_LEVELS):
    """Mean absolute calibration error, mean_l |coverage(l) - l|."""
    return jnp.mean(jnp.abs(jnp.asarray(cov) - jnp.asarray(levels, jnp.asarray(cov).dtype)))


# ----------------------------------------------------------------------------
# Split-conformal recalibration of interval widths


def interval_scores(samples, truth, level, weights=None):
    """Width-normalized nonconformity scores `(...)` of `truth (...)` for the central `level` interval.

    `samples (N, ...)` one case's ensemble (optional `weights (N,)`); the interval is the
    (1 - level) / 2 to (1 + level) / 2 quantile range of `weighted_quantiles`.

    With median m and interval [lo, hi], s = (m - y) / (m - lo) below the
    median and (y - m) / (hi - m) above, so y lies in the interval scaled by q,
    [m - q (m - lo), m + q (hi - m)], iff s <= q (s = 0 at the median, inf
    outside a zero-width side).
    """
    x = jnp.asarray(samples)
    q = weighted_quantiles(x, jnp.asarray([(1 - level) / 2, 0.5, (1 + level) / 2]), weights)
    lo, m, hi = q[0], q[1], q[2]
    y = jnp.asarray(truth, x.dtype)
    below, above = m - y, y - m
    half = jnp.where(y < m, m - lo, hi - m)
    dist = jnp.where(y < m, below, above)
    return jnp.where(dist <= 0, 0.0, jnp.where(half > 0, dist / jnp.where(half > 0, half, 1.0), jnp.inf))


def conformal_quantile(scores, level):
    """Split-conformal threshold: the ceil((n + 1) level)-th smallest of `scores (n,)` (inf if > n).

    For n calibration scores exchangeable with a test score s, P(s <= q) >= level,
    and without ties P(s <= q) <= level + 1/(n + 1) (Vovk et al. 2005; Lei et al. 2018).
    """
    s = ordering.sort(jnp.ravel(scores))
    n = s.shape[0]
    k = math.ceil((n + 1) * checks.open_unit("level", level))
    if k > n:
        return jnp.asarray(jnp.inf, s.dtype)
    return s[k - 1]


def conformal_scale(samples, truth, level, *, per_element=False):
    """Conformal width scale from calibration cases `samples (n, N, ...)`, `truth (n, ...)`.

    `per_element=False` pools the scores of all elements of all cases (one
    threshold; the finite-sample guarantee is exact when the pooled units are
    exchangeable, e.g. scalar targets, and marginal over elements otherwise);
    `per_element=True` gives one threshold per element `(...)` from the n
    cases, with the exact guarantee at every element.
    """
    level = checks.open_unit("level", level)
    x = checks.ensemble(samples, "samples", min_ndim=2)
    t = jnp.asarray(truth, x.dtype)
    if t.shape != (x.shape[0],) + x.shape[2:]:
        raise ValueError(f"truth: expected shape {(x.shape[0],) + x.shape[2:]}, got {t.shape}")
    checks.finite(x, "samples")
    scores = jax.vmap(lambda s, y: interval_scores(s, y, level))(x, t)
    if per_element:
        flat = scores.reshape(scores.shape[0], -1)
        return jax.vmap(lambda col: conformal_quantile(col, level), in_axes=1)(flat).reshape(scores.shape[1:])
    return conformal_quantile(scores, level)


def conformal_intervals(samples, level, scale, weights=None):
    """Recalibrated central interval `(lo, hi)`, each `(...)`: [m - q (m - lo), m + q (hi - m)].

    `samples (N, ...)` one case's ensemble, `scale` q the threshold of `conformal_scale` (a
    scalar, or `(...)` per element); split conformal prediction (Lei et al. 2018).
    """
    q = weighted_quantiles(samples, jnp.asarray([(1 - level) / 2, 0.5, (1 + level) / 2]), weights)
    lo, m, hi = q[0], q[1], q[2]
    return m - scale * (m - lo), m + scale * (hi - m)


# ----------------------------------------------------------------------------
# Population-level marginal fidelity


def _pool(samples, truth):
    x = checks.ensemble(samples, "samples", min_ndim=2)
    t = jnp.asarray(truth, x.dtype)
    if t.shape != (x.shape[0],) + x.shape[2:]:
        raise ValueError(
            f"truth: expected shape {(x.shape[0],) + x.shape[2:]} for samples {x.shape}, got {t.shape}"
        )
    checks.finite(t, "truth")
    return x, t


def marginal_wasserstein(samples, truth):
    """W1 between the pooled predicted values and the pooled truth.

    `samples (L, N, ...)` over L cases (N = 1 for point estimates), `truth (L, ...)`.
    Every predicted value carries weight 1 / (L N x elements), every true value
    1 / (L x elements): the population marginal p(z) against its prediction.
    """
    x, t = _pool(samples, truth)
    return checks.nan_if_nonfinite(wasserstein_1d(x.ravel(), t.ravel()), x)


def _histogram(values, edges):
    """`jnp.histogram(values, bins=edges)[0]` (`(bins,)`, float counts; out-of-range and NaN dropped).

    With `ordering.INTEGER_KEYS`, from the sorted values (the sort `marginal_wasserstein` also
    makes of the same pooled values, so XLA sorts once): count_b = #{e_b <= v < e_(b+1)}, the
    last bin closed, by binary search of the edges; the same integer counts.
    """
    if not ordering.INTEGER_KEYS:
        return jnp.histogram(values, bins=edges)[0]
    s = ordering.sort(values)
    left = jnp.searchsorted(s, edges, side="left")
    right_end = jnp.searchsorted(s, edges[-1], side="right")
    upper = jnp.concatenate([left[1:-1], right_end[None]])
    return (upper - left[:-1]).astype(jnp.result_type(float))


def histogram_ratio(samples, truth, *, bins=20, value_range=None):
    """Ratio of pooled predicted to pooled true histograms: `(edges (bins + 1,), ratio (bins,))`.

    Densities on common edges over `value_range` (default: the truth's range);
    predicted mass outside the range is dropped; ratio NaN where the truth bin
    is empty. A point estimator shows ratio < 1 in the tails, > 1 in the bulk.
    """
    x, t = _pool(samples, truth)
    lo, hi = (jnp.min(t), jnp.max(t)) if value_range is None else value_range
    edges = jnp.linspace(lo, hi, bins + 1)
    px, pt = _histogram(x.ravel(), edges), _histogram(t.ravel(), edges)
    dx, dt = px / x.size, pt / t.size
    return edges, jnp.where(pt > 0, dx / jnp.where(pt > 0, dt, 1.0), jnp.nan)


def histogram_ratio_error(samples, truth, *, bins=20):
    """Scalar summary of `histogram_ratio`: sum_b p_b |r_b - 1| (lower is better, 0 to 2).

    `samples (L, N, ...)` over L cases, `truth (L, ...)`.

    On `bins` equal-width bins over the pooled truth's range [min t, max t]
    (`histogram_ratio`'s default edges), p_b is the fraction of true values in
    bin b, q_b the fraction of predicted values (of all L N x elements, so mass
    outside the range counts as missing) and r_b = q_b / p_b the ratio the
    spectrum-fidelity panel draws. The truth-weighted mean deviation of the
    ratio from 1 is sum over bins with p_b > 0 of |q_b - p_b|: 0 exactly when
    the binned marginals agree, 1 when no predicted value falls in a populated
    bin, towards 2 when all predicted mass sits in one bin of small truth mass.
    A summary we chose: the pointwise-metrics paper shows the ratio as a curve.
    """
    x, t = _pool(samples, truth)
    edges = jnp.linspace(jnp.min(t), jnp.max(t), bins + 1)
    q = _histogram(x.ravel(), edges) / x.size
    p = _histogram(t.ravel(), edges) / t.size
    return checks.nan_if_nonfinite(jnp.sum(jnp.where(p > 0, jnp.abs(q - p), 0.0)), x)


def variance_decomposition(samples, truth):
    """Law-of-total-variance decomposition of the pooled predicted marginal (scalars).

    `samples (L, N, ...)` over L cases (N = 1 for a point estimate), `truth (L, ...)`.

    Returns a dict: `truth` Var[z]; `predicted` the pooled predictive variance
    = `within` E_x[Var(z | x)] (mean per-case ensemble variance) + `between`
    Var_x[E(z | x)] (variance of the case means, i.e. of a point estimate);
    `point_ratio` = between / truth, the factor by which a posterior-mean point
    estimate narrows the marginal; `predicted_ratio` = predicted / truth.
    Pooled over elements.
    """
    x, t = _pool(samples, truth)
    means = x.mean(axis=1)
    within = jnp.mean(jnp.var(x, axis=1))
    between = jnp.var(means)
    tv = jnp.var(t)
    out = {
        "truth": tv,
        "predicted": within + between,
        "within": within,
        "between": between,
        "point_ratio": between / tv,
        "predicted_ratio": (within + between) / tv,
    }
    return checks.nan_if_nonfinite(out, x)


# ----------------------------------------------------------------------------
# TARP expected coverage


def _check_conditional(samples, truth, min_size=1):
    x = jnp.asarray(samples)
    if x.ndim < 3:
        raise ValueError(f"samples: expected (L, N, d) or (L, N, ...), got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    if x.shape[0] < 1:
        raise ValueError(f"samples: expected at least one condition (L >= 1), got shape {x.shape}")
    x = x.reshape(x.shape[0], x.shape[1], -1)
    t = jnp.asarray(truth, x.dtype)
    if t.shape[0] != x.shape[0] or math.prod(t.shape[1:]) != x.shape[2]:
        raise ValueError(
            f"truth: expected ({x.shape[0]}, ...) with {x.shape[2]} elements per condition, got {t.shape}"
        )
    if x.shape[1] < min_size:
        raise ValueError(f"samples: expected at least {min_size} samples per condition, got {x.shape[1]}")
    t = t.reshape(t.shape[0], -1)
    checks.finite(x, "samples")
    checks.finite(t, "truth")
    return x, t


def _validate_options(normalize, metric):
    if normalize not in ("truth", "all", None):
        raise ValueError(f"normalize: expected 'truth', 'all' or None, got {normalize!r}")
    if metric not in ("euclidean", "manhattan"):
        raise ValueError(f"metric: expected 'euclidean' or 'manhattan', got {metric!r}")


def _box(x, t, normalize):
    if normalize is None:
        return jnp.zeros(t.shape[1], t.dtype), jnp.ones(t.shape[1], t.dtype)
    if normalize == "truth":
        low, high = t.min(axis=0), t.max(axis=0)
    elif normalize == "all":
        low = jnp.minimum(t.min(axis=0), x.min(axis=(0, 1)))
        high = jnp.maximum(t.max(axis=0), x.max(axis=(0, 1)))
    else:
        raise ValueError(f"normalize: expected 'truth', 'all' or None, got {normalize!r}")
    return low, high - low + 1e-10  # a constant coordinate maps to 0, not 0 / 0


def _distance(a, b, metric):
    if metric == "euclidean":
        return jnp.sqrt(jnp.sum((a - b) ** 2, axis=-1))
    if metric == "manhattan":
        return jnp.sum(jnp.abs(a - b), axis=-1)
    raise ValueError(f"metric: expected 'euclidean' or 'manhattan', got {metric!r}")


def tarp_credibility(samples, truth, references, metric="euclidean"):
    """TARP credibility f_i = mean_j 1[d(x_ij, r_i) < d(theta_i, r_i)] -> `(L,)`.

    All inputs already in the normalized space: `samples (L, N, d)`,
    `truth (L, d)`, `references (L, d)`. Strict `<` as the tarp package.
    """
    ds = _distance(samples, references[:, None, :], metric)
    dt = _distance(truth, references, metric)
    return jnp.mean(ds < dt[:, None], axis=1)


def expected_coverage(f, num_alpha_bins):
    """ECP curve `(ecp, alpha)`, each `(K + 1,)`, from credibilities `f (L,)`.

    alpha = linspace(0, 1, K + 1); ecp_k = fraction of f in [0, alpha_k) for
    k < K and 1 at alpha = 1: the tarp package's cumulative histogram, but on a
    fixed [0, 1] grid (the package bins over [min f, max f]).
    """
    alpha = jnp.linspace(0.0, 1.0, num_alpha_bins + 1, dtype=f.dtype)
    below = jnp.mean(f[None, :] < alpha[:, None], axis=1)
    ecp = below.at[-1].set(jnp.mean(f <= 1.0))
    return ecp, alpha


def tarp(
    key,
    samples,
    truth,
    *,
    references=None,
    normalize="truth",
    metric="euclidean",
    num_alpha_bins=None,
):
    """TARP expected coverage probability (Lemos et al. 2023) -> `(ecp, alpha)`, each `(K + 1,)`.

    `samples (L, N, d)` (or `(L, N, ...)`, flattened), `truth (L, d)`.
    Normalization maps every dimension to [0, 1] with an affine map from the
    per-dimension bounds of the truths over all L conditions (``"truth"``,
    the package's ``norm=True``), of truths and samples (``"all"``), or none
    (None). One reference point per condition, uniform in the normalized box,
    drawn from `key`; or `references (L, d)` given in the data space and
    normalized with the same map (the package leaves them unnormalized).
    K = `num_alpha_bins` (default L // 10, as the package).
    A calibrated posterior gives ecp ~ alpha. See `tarp_bootstrap`, `tarp_summary`.
    """
    x, t = _check_conditional(samples, truth)
    _validate_options(normalize, metric)
    refs = _references(references, t)
    k = checks.optional_positive_int("num_alpha_bins", num_alpha_bins) or max(t.shape[0] // 10, 1)
    return _tarp(key, x, t, refs, normalize, metric, k)


def _references(references, t):
    """`references` as `(L, d)` like the truths `t`, finite (None stays None)."""
    if references is None:
        return None
    refs = jnp.asarray(references, t.dtype)
    if refs.size != t.size or refs.shape[0] != t.shape[0]:
        raise ValueError(
            f"references: expected one point per condition, shape {t.shape} (or ({t.shape[0]}, ...) with "
            f"{t.shape[1]} elements each), got {refs.shape}"
        )
    checks.finite(refs, "references")
    return refs.reshape(t.shape)


@functools.partial(jax.jit, static_argnums=(4, 5, 6))
def _tarp(key, x, t, references, normalize, metric, num_alpha_bins):
    low, width = _box(x, t, normalize)
    xn, tn = (x - low) / width, (t - low) / width
    if references is None:
        refs = jr.uniform(key, tn.shape, tn.dtype)
    else:
        refs = jnp.asarray(references, tn.dtype).reshape(tn.shape)
        refs = (refs - low) / width
    return expected_coverage(tarp_credibility(xn, tn, refs, metric), num_alpha_bins)


def tarp_bootstrap(
    key,
    samples,
    truth,
    *,
    num_bootstrap=100,
    references=None,
    normalize="truth",
    metric="euclidean",
    num_alpha_bins=None,
):
    """Bootstrap ECP curves `(ecp (B, K + 1), alpha (K + 1,))` over conditions.

    Iteration b uses its own key `fold_in(key, b)`: fresh resampling of the L
    conditions with replacement and fresh reference points (supplied
    references are resampled with their conditions). The package instead
    re-seeds its global RNG each iteration (so a fixed seed reuses the same
    draws) and replaces one condition at a time, cumulatively, in place.
    """
    x, t = _check_conditional(samples, truth)
    k = checks.optional_positive_int("num_alpha_bins", num_alpha_bins) or max(t.shape[0] // 10, 1)
    num_bootstrap = checks.positive_int("num_bootstrap", num_bootstrap)
    _validate_options(normalize, metric)
    refs = _references(references, t)
    return _tarp_bootstrap(key, x, t, refs, normalize, metric, k, num_bootstrap)


@functools.partial(jax.jit, static_argnums=(4, 5, 6, 7))
def _tarp_bootstrap(key, x, t, refs, normalize, metric, k, num_bootstrap):
    def one(b):
        kb = jr.fold_in(key, b)
        k_idx, k_ref = jr.split(kb)
        idx = jr.randint(k_idx, (t.shape[0],), 0, t.shape[0])
        r = None if refs is None else refs[idx]
        return _tarp(k_ref, x[idx], t[idx], r, normalize, metric, k)[0]

    ecp = jax.vmap(one)(jnp.arange(num_bootstrap))
    return ecp, jnp.linspace(0.0, 1.0, k + 1, dtype=t.dtype)


def tarp_summary(ecp, alpha):
    """Scalar summaries of an ECP curve: dict of `atc`, `area`, `ks`. Works on `(..., K + 1)`.

    ks = max |ECP - alpha|, the Kolmogorov-Smirnov distance of the
    credibilities to U(0, 1): the primary number (0 iff calibrated as
    L -> inf, Lemos et al. 2023, Thm. 3). area = int |ECP - alpha| d alpha.
    atc = int_0^1 (ECP - alpha) d alpha (trapezoid) = 1/2 - mean(f) up to the
    binning: > 0 when the truths lie nearer to the reference points than the
    samples do, < 0 when farther. Its sign is *not* a reading of confidence:
    with reference points far from the posterior (the usual case: uniform or
    prior references and a narrow posterior) over- and under-confident
    posteriors both give S-shaped curves with atc ~ 0 (MIRA paper Sec. 5.1
    toy, L = 1000: |atc| < 0.01 for both, ks 0.13 over- and 0.09 under-confident,
    0.02 calibrated); only near a reference point does an
    over-confident posterior push atc below 0. Read |atc| (or ks), not its sign.
    """
    diff = ecp - alpha
    return {
        "atc": jnp.trapezoid(diff, alpha, axis=-1),
        "area": jnp.trapezoid(jnp.abs(diff), alpha, axis=-1),
        "ks": jnp.max(jnp.abs(diff), axis=-1),
    }


def tarp_band(boot_ecp, level=0.95):
    """Pointwise bootstrap band `(lo, hi)`, each `(K + 1,)`, of `tarp_bootstrap` curves `(B, K + 1)`.

    The (1 - level)/2 and (1 + level)/2 percentiles over the B resamples.
    """
    q = jnp.asarray([(1 - level) / 2, (1 + level) / 2])
    lo, hi = jnp.quantile(jnp.asarray(boot_ecp), q, axis=0)
    return lo, hi


def observation_references(key, anchors, half_width):
    """Observation-dependent TARP reference points `(L, d)`: anchor + U(-h, h)^d, data units.

    `anchors (L, d)` is a map of each condition's observation (never of its
    truth), `half_width` h a scalar or `(d,)` in data units. A reference that
    depends on the observation lets TARP see a posterior that ignores it (the
    prior returned as the posterior; Lemos et al. 2023, Sec. 4.3), which
    references independent of the observation cannot.
    """
    a = jnp.asarray(anchors)
    h = jnp.asarray(half_width, a.dtype)
    if h.ndim > 1 or h.size not in (1, a.shape[-1]):
        raise ValueError(f"half_width: expected a scalar or {a.shape[-1]} values, got shape {h.shape}")
    return a + h * jr.uniform(key, a.shape, a.dtype, -1.0, 1.0)


# ----------------------------------------------------------------------------
# Simulation-based calibration on random projections


def sbc_ranks(key, samples, truth, *, num_projections=16):
    """SBC ranks `(P, L)` in {0..N} of the truth among samples on P random 1-D projections.

    Directions are isotropic Gaussian unit vectors drawn from `key`;
    rank = #{j : v . x_ij < v . theta_i}. Uniform on {0..N} when calibrated.
    """
    x, t = _check_conditional(samples, truth)
    v = jr.normal(key, (num_projections, t.shape[1]), t.dtype)
    v = v / jnp.linalg.norm(v, axis=1, keepdims=True)
    px = jnp.einsum("lnd,pd->pln", x, v)
    pt = jnp.einsum("ld,pd->pl", t, v)
    return jnp.sum(px < pt[..., None], axis=-1)


def kolmogorov_sf(lam):
    """Survival function of the Kolmogorov distribution, 2 sum_j (-1)^(j-1) exp(-2 j^2 lam^2)."""
    j = jnp.arange(1, 101, dtype=jnp.result_type(lam, float))
    terms = (-1.0) ** (j - 1) * jnp.exp(-2.0 * j**2 * jnp.asarray(lam)[..., None] ** 2)
    # below lam = 0.2 the CDF is under 1e-12, and the 100-term alternating series stops
    # converging as lam -> 0 (3e-4 off at 0.02): the survival function is 1 there
    return jnp.where(lam < 0.2, 1.0, jnp.clip(2.0 * jnp.sum(terms, axis=-1), 0.0, 1.0))


def ks_uniform(u):
    """One-sample KS test of `u (..., n)` against U(0, 1): `(D, p_value)` each `(...)`.

    p from the asymptotic Kolmogorov law with Stephens' small-n correction
    lam = (sqrt(n) + 0.12 + 0.11 / sqrt(n)) D.
    """
    u = ordering.sort(u, axis=-1)
    n = u.shape[-1]
    i = jnp.arange(1, n + 1, dtype=u.dtype)
    d = jnp.maximum(jnp.max(i / n - u, axis=-1), jnp.max(u - (i - 1) / n, axis=-1))
    sn = math.sqrt(n)
    return d, kolmogorov_sf((sn + 0.12 + 0.11 / sn) * d)


def sbc_test(key, samples, truth, *, num_projections=16):
    """SBC on random projections: dict with `ranks (P, L)`, KS `ks (P,)`, `p_value (P,)`, `min_p_value`.

    Ranks are mapped to U(0, 1) by u = (rank + V) / (N + 1), V ~ U(0, 1)
    (randomized PIT, exactly uniform when calibrated) and KS-tested.
    `min_p_value` is Bonferroni-corrected (times P, capped at 1).
    """
    x, t = _check_conditional(samples, truth)
    return _sbc_test(key, x, t, num_projections)


@functools.partial(jax.jit, static_argnums=3)
def _sbc_test(key, x, t, num_projections):
    k_dir, k_jit = jr.split(key)
    ranks = sbc_ranks(k_dir, x, t, num_projections=num_projections)
    u = (ranks + jr.uniform(k_jit, ranks.shape, x.dtype)) / (x.shape[1] + 1)
    d, p = ks_uniform(u)
    return {
        "ranks": ranks,
        "ks": d,
        "p_value": p,
        "min_p_value": jnp.minimum(1.0, num_projections * jnp.min(p)),
    }
