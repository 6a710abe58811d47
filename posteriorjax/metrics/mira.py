"""MIRA: a score of conditional-distribution accuracy from one true sample per condition.

Sharief et al., "MIRA: A Score for Conditional Distribution Accuracy and Model
Comparison" (Sec. 3, Algorithm 1; App. B.2, E.4, E.5). For each of L
conditions with true sample y* and N candidate samples y_1..y_N (flat vectors
`(d,)` or whole fields, flattened):

1. Normalize to [0, 1] per dimension with the affine map from the per-dimension
   min and max. ``normalization="candidates"`` (the paper, Sec. 5: "samples
   {y_j} are normalized to [0, 1] with y* following the same normalization")
   takes them over the N candidates only, so y* may fall outside [0, 1];
   ``"with_truth"`` over the candidates *and* the truth (a symmetric function
   of all N + 1 points, which keeps them exactly exchangeable under the null;
   less sensitive to heavy tails in our runs: docs/metrics.md, "Which normalization"). A zero-width
   dimension gets width 1.
2. Draw R regions: a centre c from p(c) in the normalized space
   (``centres="uniform"`` U(a, b)^d with (a, b) = (0, 1) by default, the paper;
   ``"normal"`` N(loc, scale^2)^d, default (0, 1); ``"beta"`` Beta(a, b)^d,
   default (2, 5); the options of App. E.5(6)-(7)) or, with `centre_anchors`,
   the observation-dependent centres of App. E.4, c = anchor + U(-h, h)^d with
   the anchor (a map of the observation) and the half-width h in *data units*
   (default h = 0.05 as the paper), then normalized like the samples; a
   reference point y_r drawn uniformly from the candidates and excluded from
   the count; radius r = d(c, y_r) for the distance d (``"l2"``, the paper's
   default, ``"l1"``, ``"chebyshev"``, ``"cosine"`` = 1 - cos angle, or
   ``"minkowski"`` with `minkowski_p`, App. E.5(5)); region B = {y : d(c, y) < r}.
3. n = number of the N' = N - 1 remaining candidates inside B, k = 1[y* in B];
   statistic s = (n + 1) / (N' + 2) if k = 1 else (N' - n + 1) / (N' + 2)
   (Laplace's rule of succession).
4. Score = mean of s over regions and conditions. The ``"sufficient"`` variant
   (App. B.2) keeps only the regions with k = 1: q = (n + 1) / (N' + 2), whose
   law under the null is Beta(2, 1) (discrete for finite N'), a necessary and
   sufficient condition of calibration; its score is the mean of q over the
   kept regions.

Under a calibrated model y*, y_r and the counted candidates are exchangeable,
the mass of B under the candidate is U(0, 1), and the exact finite-N' moments
are E[s] = (2N' + 3) / (3 (N' + 2)) -> 2/3 and
Var[s] = (N' + 1) / (2 (N' + 2)) - E[s]^2 -> 1/18 (the same for q given
k = 1). Scores below the mean indicate over-confidence or bias, above it
under-confidence. The uncertainty of the score is the paper's (Sec. 3.4): the
spread of the score over bootstrap resamples of the conditions
(`bootstrap_std`); `standard_error` = sqrt(Var / L) treats each condition as a
single region and overstates it (averaging R regions lowers the variance).

`mira` scores L conditions at once; `condition_statistic` is step 4 for one
condition (for programs that handle one condition at a time);
`region_statistics` returns every region's (s, k).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks

NORMALIZATIONS = ("candidates", "with_truth")
DISTANCES = ("l2", "l1", "chebyshev", "cosine", "minkowski")
CENTRES = {"uniform": (0.0, 1.0), "normal": (0.0, 1.0), "beta": (2.0, 5.0)}
VARIANTS = ("standard", "sufficient")
PAPER_HALF_WIDTH = 0.05


class Options(NamedTuple):
    """Static MIRA region options (see the module docstring); `centre_params` resolved."""

    normalization: str = "candidates"
    distance: str = "l2"
    minkowski_p: float = 3.0
    centres: str = "uniform"
    centre_params: tuple = CENTRES["uniform"]
    anchored: bool = False


def options(
    *,
    normalization="candidates",
    distance="l2",
    minkowski_p=3.0,
    centres="uniform",
    centre_params=None,
    anchored=False,
) -> Options:
    """Validated `Options`; `centre_params` defaults to `CENTRES[centres]`."""
    checks.in_choices("normalization", normalization, NORMALIZATIONS)
    checks.in_choices("distance", distance, DISTANCES)
    if distance == "minkowski" and not float(minkowski_p) >= 1.0:
        raise ValueError(f"minkowski_p: expected p >= 1 (a metric), got {minkowski_p!r}")
    checks.in_choices("centres", centres, tuple(CENTRES))
    params = CENTRES[centres] if centre_params is None else tuple(float(v) for v in centre_params)
    if len(params) != 2:
        raise ValueError(f"centre_params: expected two numbers for {centres!r}, got {centre_params!r}")
    if centres == "uniform" and not params[0] < params[1]:
        raise ValueError(f"centre_params: expected low < high for uniform centres, got {params}")
    if centres in ("normal", "beta") and not (params[1] > 0 and (centres == "normal" or params[0] > 0)):
        raise ValueError(f"centre_params: expected positive parameters (scale / Beta a, b), got {params}")
    return Options(normalization, distance, float(minkowski_p), centres, params, bool(anchored))


class MiraResult(NamedTuple):
    """Result of `mira` (a pytree; every field a JAX scalar unless noted).

    score: mean MIRA statistic over regions and conditions (of q over the
        k = 1 regions for the sufficient variant).
    per_condition: `(L,)` mean statistic per condition (NaN for a sufficient-
        variant condition without a k = 1 region).
    bootstrap_std: std of the score over bootstrap resamples of the conditions
        (the paper's uncertainty, Sec. 3.4).
    expected_mean, expected_var: exact calibrated mean and variance of one
        statistic for N' = N - 1 counted candidates.
    standard_error: sqrt(expected_var / L), the calibrated uncertainty of a
        single-region score (conservative: averaging R regions lowers it).
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


def _distances(centres, points, opts: Options):
    """Distances `(R, N)` (or a monotone transform of them) between `centres (R, d)`, `points (N, d)`."""
    if opts.distance == "l2":
        # squared distances by the expansion (only their order matters); HIGHEST matmul precision,
        # as an accelerator's default reduced-precision passes would reorder near-equal distances
        cc = jnp.sum(centres**2, axis=1)
        cross = jnp.matmul(centres, points.T, precision=jax.lax.Precision.HIGHEST)
        return jnp.sum(points**2, axis=1)[None, :] + cc[:, None] - 2.0 * cross
    if opts.distance == "cosine":
        dots = jnp.matmul(centres, points.T, precision=jax.lax.Precision.HIGHEST)
        norms = jnp.linalg.norm(centres, axis=1)[:, None] * jnp.linalg.norm(points, axis=1)[None, :]
        return 1.0 - dots / jnp.where(norms > 0, norms, 1.0)  # a zero vector: distance 1, not 0 / 0

    def one(c):  # (d,) -> (N,); regions one batch at a time keeps memory O(batch N d)
        diff = jnp.abs(points - c)
        if opts.distance == "l1":
            return jnp.sum(diff, axis=1)
        if opts.distance == "chebyshev":
            return jnp.max(diff, axis=1)
        return jnp.sum(diff**opts.minkowski_p, axis=1)  # the p-th power: monotone in the distance

    return jax.lax.map(one, centres, batch_size=min(8, centres.shape[0]))


def _draw_centres(key, num_regions, d, dtype, opts: Options):
    a, b = opts.centre_params
    if opts.anchored or opts.centres == "uniform":
        lo, hi = (-1.0, 1.0) if opts.anchored else (a, b)
        return jr.uniform(key, (num_regions, d), dtype, lo, hi)
    if opts.centres == "normal":
        return a + b * jr.normal(key, (num_regions, d), dtype)
    return jr.beta(key, a, b, (num_regions, d), dtype)


def _region_statistics(key, samples, truth, anchor, half_width, *, opts: Options, num_regions):
    """Per-region `(s (R,), k (R,))` of one validated condition; see the module docstring."""
    n, d = samples.shape
    low, high = samples.min(axis=0), samples.max(axis=0)
    if opts.normalization == "with_truth":
        low, high = jnp.minimum(low, truth), jnp.maximum(high, truth)
    width = high - low
    width = jnp.where(width > 0, width, 1.0)  # a zero-width dimension: width 1, not 0 / 0
    x = (samples - low) / width
    t = (truth - low) / width
    k_centre, k_ref = jr.split(key)
    centres = _draw_centres(k_centre, num_regions, d, x.dtype, opts)
    if opts.anchored:  # U(-1, 1) draws scaled to the half-width in data units, then normalized
        centres = (anchor + half_width * centres - low) / width
    ref_index = jr.randint(k_ref, (num_regions,), 0, n)  # y_r: it sets the radius, so it is not counted
    dx = _distances(centres, x, opts)
    dt = _distances(centres, t[None], opts)[:, 0]
    radius = jnp.take_along_axis(dx, ref_index[:, None], axis=1)[:, 0]
    counted = jnp.arange(n)[None, :] != ref_index[:, None]
    # strictly inside, as B = {y : d(c, y) < r}: y_r itself (on the boundary) is never inside
    inside = jnp.sum((dx < radius[:, None]) & counted, axis=1)
    k = dt < radius
    m = n - 1
    s = jnp.where(k, inside + 1, m - inside + 1) / (m + 2)
    return s, k


def _check_condition(samples, truth, center_anchor, half_width):
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
    a = t
    if center_anchor is not None:
        a = jnp.asarray(center_anchor, x.dtype)
        if a.size != t.size:
            raise ValueError(f"center_anchor: expected {t.size} elements (one point), got shape {a.shape}")
        a = a.reshape(-1)
    return x, t, a, _half_width(half_width, t.size, x.dtype)


def _half_width(half_width, d, dtype):
    h = jnp.asarray(half_width, dtype)
    if h.ndim > 1 or h.size not in (1, d):
        raise ValueError(
            f"anchor_half_width: expected a scalar or {d} per-dimension values, got shape {h.shape}"
        )
    if not checks.is_traced(h) and not bool(jnp.all(h > 0)):
        raise ValueError(f"anchor_half_width: expected > 0 (data units), got {h}")
    return jnp.broadcast_to(h.reshape(-1), (d,))


def region_statistics(
    key, samples, truth, *, num_regions=100, center_anchor=None, anchor_half_width=PAPER_HALF_WIDTH, **opts
):
    """Every region's `(s (R,), k (R,))` for one condition: statistic and truth-inside indicator.

    Inputs as `condition_statistic`; `opts` are `options`' keywords. Under the
    null, s of one region is a single MIRA statistic and s where k is True is
    the sufficient variant's q (App. B.2).
    """
    x, t, a, h = _check_condition(samples, truth, center_anchor, anchor_half_width)
    o = options(anchored=center_anchor is not None, **opts)
    return _region_statistics(key, x, t, a, h, opts=o, num_regions=int(num_regions))


def condition_statistic(
    key, samples, truth, *, num_regions=100, center_anchor=None, anchor_half_width=PAPER_HALF_WIDTH, **opts
):
    """Mean MIRA statistic of one condition over `num_regions` regions -> scalar.

    `samples (N, d)` (or `(N, ...)`, flattened) are the N >= 2 candidates of
    one condition and `truth (d,)` (or `(...)`) its true sample; regions are
    drawn from `key` as in the module docstring: centres from p(c), or
    `center_anchor (d,)` (data units) + U(-h, h) with h = `anchor_half_width`
    (scalar or `(d,)`, data units); `opts` are the keywords of `options`
    (normalization, distance, minkowski_p, centres, centre_params). Pure and
    jit/vmap-able (shapes are checked when traced, values are not): NaN when
    any input value is non-finite. With `key = fold_in(split(k)[0], i)` it is
    `mira(k, ...).per_condition[i]` for the same options, so per-condition
    statistics computed separately (e.g. by a sweep, one condition per
    configuration) average to the `mira` score; `expected_moments(N - 1)` gives
    its calibrated mean and the variance of a single-region statistic.
    """
    x, t, a, h = _check_condition(samples, truth, center_anchor, anchor_half_width)
    o = options(anchored=center_anchor is not None, **opts)
    s, _ = _region_statistics(key, x, t, a, h, opts=o, num_regions=int(num_regions))
    finite = jnp.all(jnp.isfinite(x)) & jnp.all(jnp.isfinite(t)) & jnp.all(jnp.isfinite(a))
    return jnp.where(finite, jnp.mean(s), jnp.nan)


def mira(
    key,
    samples,
    truth,
    *,
    num_regions=100,
    center_anchors=None,
    anchor_half_width=PAPER_HALF_WIDTH,
    variant="standard",
    num_bootstrap=1000,
    batch_size=64,
    **opts,
) -> MiraResult:
    """MIRA score of candidate samples `(L, N, d)` (or `(L, N, ...)`) against truths `(L, d)` (or `(L, ...)`).

    See the module docstring for the construction. `center_anchors (L, d)`
    (data units; a map of each condition's observation) switches to the
    observation-dependent centres anchor + U(-h, h), h = `anchor_half_width`
    (data units, scalar or `(d,)`). `variant` is ``"standard"`` (Algorithm 1)
    or ``"sufficient"`` (App. B.2: only k = 1 regions). `opts` are the keywords
    of `options` (normalization, distance, minkowski_p, centres,
    centre_params); defaults are the paper's. The per-condition randomness is
    `fold_in(split(key)[0], condition index)`; the bootstrap resamples the
    conditions with replacement (`num_bootstrap` times) and recomputes the
    score. Conditions are processed `batch_size` at a time (`jax.lax.map`), so
    memory is O(batch_size R N).
    """
    x = jnp.asarray(samples)
    if x.ndim < 3:
        raise ValueError(f"samples: expected (L, N, d) or (L, N, ...), got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    num_conditions, n = x.shape[:2]
    checks.positive_ints(num_regions=num_regions, num_bootstrap=num_bootstrap, batch_size=batch_size)
    if num_conditions < 1:
        raise ValueError(f"samples: expected at least one condition (L >= 1), got shape {x.shape}")
    if n < 2:
        raise ValueError(
            f"samples: MIRA needs N >= 2 candidates per condition (one is the reference), got {n}"
        )
    checks.in_choices("variant", variant, VARIANTS)
    x = x.reshape(num_conditions, n, -1)
    t = jnp.asarray(truth, x.dtype)
    if t.shape[0] != num_conditions or t.size != num_conditions * x.shape[2]:
        raise ValueError(
            f"truth: expected ({num_conditions}, ...) with {x.shape[2]} elements each, got {t.shape}"
        )
    t = t.reshape(num_conditions, -1)
    checks.finite(x, "samples")
    checks.finite(t, "truth")
    anchored = center_anchors is not None
    if anchored:
        a = jnp.asarray(center_anchors, x.dtype)
        if a.size != t.size:
            raise ValueError(f"center_anchors: expected {t.shape} (one point per condition), got {a.shape}")
        a = a.reshape(t.shape)
        checks.finite(a, "center_anchors")
    else:
        a = t
    h = _half_width(anchor_half_width, t.shape[1], x.dtype)
    o = options(anchored=anchored, **opts)
    return _mira(key, x, t, a, h, o, int(num_regions), variant, int(num_bootstrap), int(batch_size))


@functools.partial(jax.jit, static_argnums=(5, 6, 7, 8, 9))
def _mira(key, x, t, a, h, opts, num_regions, variant, num_bootstrap, batch_size):
    num_conditions, n = x.shape[:2]
    k_regions, k_boot = jr.split(key)
    keys = jax.vmap(lambda i: jr.fold_in(k_regions, i))(jnp.arange(num_conditions))
    # pad the conditions to whole batches (one compiled body, no remainder branch)
    batch = min(batch_size, num_conditions)
    pad = -num_conditions % batch
    padded = jax.tree.map(lambda v: jnp.concatenate([v, v[:pad]]) if pad else v, (keys, x, t, a))

    def one(args):
        s, k = _region_statistics(*args, h, opts=opts, num_regions=num_regions)
        if variant == "sufficient":
            return jnp.sum(jnp.where(k, s, 0.0)), jnp.sum(k).astype(s.dtype)
        return jnp.sum(s), jnp.asarray(num_regions, s.dtype)

    total, count = jax.lax.map(one, padded, batch_size=batch)
    total, count = total[:num_conditions], count[:num_conditions]
    # a sufficient-variant condition without a k = 1 region: NaN, and no 0 / 0 computed on the way
    per_condition = jnp.where(count > 0, total / jnp.where(count > 0, count, 1.0), jnp.nan)
    score = jnp.sum(total) / jnp.sum(count)
    idx = jr.randint(k_boot, (num_bootstrap, num_conditions), 0, num_conditions)
    boot = jnp.sum(total[idx], axis=1) / jnp.sum(count[idx], axis=1)
    boot_std = jnp.std(boot)
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
    return result._replace(**checks.nan_if_nonfinite(arrays, x, t))
