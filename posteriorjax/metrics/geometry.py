"""Observation geometry: which joint directions of the unknown the observations constrain.

Reference (independent of any estimator). For an observation map
``H: R^m -> R^p`` (forward model composed with the observation operator, including
histories and auxiliary channels an estimator sees), a working point ``c0``, a
noise covariance ``Sigma (p, p)`` and a state metric ``G (m, m)`` (both SPD):

    J  = dH/dc (c0)                          (jax.jacfwd, or chunked JVPs)
    Jw = Sigma^(-1/2) J G^(-1/2) = U S V^T   (full SVD: V is m x m)

``s_i`` are padded with zeros to length m and set to exactly zero below the
numerical rank tolerance ``max(p, m) eps s_1``, so the right null space is part
of ``V`` with zero singular values. Direction i is *retained* when
``s_i / s_1 >= tau`` and *below-threshold* otherwise. Scaling ``Sigma`` by a
constant scales all ``s_i`` alike and leaves the partition unchanged.

Direction-wise evaluation (Recoverability-is-a-subspace-property protocol):
coordinates ``d_i = v_i^T G^(1/2) c`` (`project`), directional NRMSE (RMS error
over the test set / test std of that coordinate, `directional_nrmse`), hits
(retained and NRMSE <= delta, `hits`), confidence-ranked claims
(`selection`: recovery yield Y(j), below-threshold abstention Z(j), CRC-AUC,
geometric AUROC, excess abstention area D) and `scrs` at an operating point.
Sampler ensembles are compared with a reference posterior direction by
direction in `std_ratios`.

The selection scores are exact expectations over uniformly random orderings
within groups of tied confidence; they are host-side (NumPy) computations on
m-vectors. Undefined scores are `Score(None, reason)`, never numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks

DEFAULT_TAU = 0.05
DEFAULT_DELTA = 0.3


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Local observation geometry at a working point.

    Attributes:
      singular_values: `(m,)` whitened singular values s_i, descending, zeros past the rank.
      normalized: `(m,)` s_i / s_1.
      V: `(m, m)` right singular vectors as columns (directions in whitened state space).
      retained: bool `(m,)`, normalized >= tau.
      tau: the relative threshold.
      rank: exact (numerical) rank of Jw.
      jacobian: `(p, m)` the raw Jacobian J.
      metric_sqrt: `(m, m)` G^(1/2) (identity when no metric is given).
    """

    singular_values: np.ndarray
    normalized: np.ndarray
    V: np.ndarray
    retained: np.ndarray
    tau: float
    rank: int
    jacobian: np.ndarray
    metric_sqrt: np.ndarray

    @property
    def num_retained(self) -> int:
        return int(np.sum(self.retained))

    @property
    def num_below(self) -> int:
        return int(self.retained.size - np.sum(self.retained))

    def summary(self) -> dict:
        return {
            "m": int(self.retained.size),
            "p": int(self.jacobian.shape[0]),
            "tau": self.tau,
            "rank": self.rank,
            "retained": self.num_retained,
            "below_threshold": self.num_below,
            "normalized": [float(v) for v in self.normalized],
        }


@dataclasses.dataclass(frozen=True)
class Score:
    """A score that may be undefined: `value` is None exactly when `reason` says why."""

    value: float | None
    reason: str | None = None

    @property
    def defined(self) -> bool:
        return self.value is not None

    def __format__(self, spec: str) -> str:
        return format(self.value, spec or ".3f") if self.defined else f"undefined ({self.reason})"


# ----------------------------------------------------------------------------
# Checks


def _check_tau(tau) -> float:
    if not isinstance(tau, (int, float, np.floating)) or not 0.0 < float(tau) < 1.0:
        raise ValueError(f"tau: expected a number in the open interval (0, 1), got {tau!r}")
    return float(tau)


def _spd_inverse_sqrt(matrix, size: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """`(M^(1/2), M^(-1/2))` of an SPD matrix given as a scalar, a diagonal `(size,)` or `(size, size)`."""
    a = np.asarray(matrix, dtype=np.float64)
    if a.ndim == 0:
        a = np.full((size,), float(a))
    if a.ndim == 1:
        if a.shape != (size,):
            raise ValueError(f"{name}: expected a diagonal of shape ({size},), got {a.shape}")
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name}: expected finite positive variances (SPD), got minimum {np.min(a):.3g}")
        return np.diag(np.sqrt(a)), np.diag(1.0 / np.sqrt(a))
    if a.shape != (size, size):
        raise ValueError(f"{name}: expected a scalar, ({size},) or ({size}, {size}) matrix, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: expected finite entries, got non-finite values")
    if not np.allclose(a, a.T, rtol=1e-10, atol=1e-12 * np.max(np.abs(a))):
        raise ValueError(f"{name}: expected a symmetric positive definite matrix, got a non-symmetric one")
    w, q = np.linalg.eigh(0.5 * (a + a.T))  # symmetrized: the check above allows round-off asymmetry
    # an eigenvalue at round-off level of the largest is singular in float64, not positive
    if w[0] <= size * np.finfo(np.float64).eps * max(w[-1], 0.0) or w[-1] <= 0:
        raise ValueError(
            f"{name}: expected a symmetric positive definite matrix, "
            f"got eigenvalues in [{w[0]:.3g}, {w[-1]:.3g}]"
        )
    return (q * np.sqrt(w)) @ q.T, (q / np.sqrt(w)) @ q.T


def _check_vector(x, size: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.shape != (size,):
        raise ValueError(f"{name}: expected shape ({size},), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: expected finite values, got {int(np.sum(~np.isfinite(a)))} NaN/inf")
    return a


def _check_mask(x, size: int, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.shape != (size,) or a.dtype != np.bool_:
        raise ValueError(f"{name}: expected a boolean array of shape ({size},), got {a.dtype} {a.shape}")
    return a


# ----------------------------------------------------------------------------
# The geometric reference


def jacobian(fn: Callable, c0, *, chunk_size: int | None = None) -> jax.Array:
    """`J (p, m)` of `fn` at `c0` (any shape, flattened to m) by forward mode.

    `chunk_size=None`: one `jax.jacfwd`. Otherwise the m JVPs run in chunks of
    `chunk_size` tangents (`jax.lax.map(..., batch_size=)`), for field unknowns
    where m tangents at once would not fit in memory.
    """
    c0 = jnp.asarray(c0)
    shape = c0.shape

    def flat_fn(c):
        return jnp.ravel(fn(c.reshape(shape)))

    flat = c0.ravel()
    if chunk_size is None:
        return jax.jacfwd(flat_fn)(flat)
    eye = jnp.eye(flat.size, dtype=flat.dtype)
    cols = jax.lax.map(lambda t: jax.jvp(flat_fn, (flat,), (t,))[1], eye, batch_size=chunk_size)
    return cols.T  # one JVP per input direction is a column of J: (m, p) -> (p, m)


def from_jacobian(jac, *, noise_cov, metric=None, tau: float = DEFAULT_TAU) -> Geometry:
    """`Geometry` of a given Jacobian `(p, m)` (see module doc)."""
    tau = _check_tau(tau)
    j = np.asarray(jac, dtype=np.float64)
    if j.ndim != 2 or 0 in j.shape:
        raise ValueError(f"jac: expected a nonempty (p, m) matrix, got shape {j.shape}")
    if not np.all(np.isfinite(j)):
        raise ValueError("jac: expected finite entries, got NaN/inf (check the observation map)")
    p, m = j.shape
    _, sigma_isqrt = _spd_inverse_sqrt(noise_cov, p, "noise_cov")
    if metric is None:
        g_sqrt, g_isqrt = np.eye(m), np.eye(m)
    else:
        g_sqrt, g_isqrt = _spd_inverse_sqrt(metric, m, "metric")
    jw = sigma_isqrt @ j @ g_isqrt
    _, s, vt = np.linalg.svd(jw, full_matrices=True)
    s = np.concatenate([s, np.zeros(m - s.size)])  # p < m: the m - p unobserved directions have s = 0
    if s[0] <= 0:
        raise ValueError("observe_fn: the whitened Jacobian is zero at c0; no direction is observed")
    # numpy's matrix_rank tolerance: singular values below it are round-off, so exactly 0
    s = np.where(s > max(p, m) * np.finfo(np.float64).eps * s[0], s, 0.0)
    normalized = s / s[0]
    return Geometry(
        singular_values=s,
        normalized=normalized,
        V=vt.T,
        retained=normalized >= tau,
        tau=tau,
        rank=int(np.sum(s > 0)),
        jacobian=j,
        metric_sqrt=g_sqrt,
    )


def analyze(
    observe_fn: Callable,
    c0,
    *,
    noise_cov,
    metric=None,
    tau: float = DEFAULT_TAU,
    chunk_size: int | None = None,
) -> Geometry:
    """Local observation geometry of `observe_fn: (m,) -> (p,)` at `c0 (m,)`.

    Args:
      observe_fn: the observation map the estimator sees (all channels, all frames).
      c0: working point `(m,)` (or any shape; flattened).
      noise_cov: noise covariance: scalar variance, diagonal `(p,)` or SPD `(p, p)`.
      metric: state metric G: None (identity), diagonal `(m,)` or SPD `(m, m)`.
      tau: relative threshold in (0, 1).
      chunk_size: JVP chunk size for large m (see `jacobian`).
    """
    _check_tau(tau)
    jac = jacobian(observe_fn, c0, chunk_size=chunk_size)
    return from_jacobian(jac, noise_cov=noise_cov, metric=metric, tau=tau)


def finite_difference_check(
    observe_fn: Callable, c0, jac=None, *, steps: Sequence[float] = (1e-2, 3e-3, 1e-3, 3e-4)
) -> dict:
    """Central-difference Jacobians over a step sweep against the forward-mode `jac`.

    Returns `{"steps", "relative_error"}` (``||J_fd(h) - J|| / ||J||``, Frobenius)
    and `"adjacent_change"` (``||J_fd(h_k) - J_fd(h_{k+1})|| / ||J||``).
    """
    c0 = jnp.asarray(c0)
    flat = c0.ravel()
    if jac is None:
        jac = jacobian(observe_fn, c0)
    jac = np.asarray(jac, np.float64)

    @jax.jit
    def fd(h):
        def col(e):
            up = jnp.ravel(observe_fn((flat + h * e).reshape(c0.shape)))
            down = jnp.ravel(observe_fn((flat - h * e).reshape(c0.shape)))
            return (up - down) / (2 * h)

        return jax.vmap(col)(jnp.eye(flat.size, dtype=flat.dtype)).T

    fds = [np.asarray(fd(jnp.asarray(h, flat.dtype)), np.float64) for h in steps]
    norm = np.linalg.norm(jac)
    return {
        "steps": [float(h) for h in steps],
        "relative_error": [float(np.linalg.norm(f - jac) / norm) for f in fds],
        "adjacent_change": [
            float(np.linalg.norm(a - b) / norm) for a, b in zip(fds[:-1], fds[1:], strict=True)
        ],
    }


def perturbation_ratio(
    observe_fn: Callable, c0, geometry: Geometry, *, noise_cov, direction: int = -1, delta: float = 1e-3
) -> dict:
    """Finite-perturbation ratio along the right singular vector `direction` (default: the last).

    With c_pm = c0 +- delta G^(-1/2) v_i (so ||c_+ - c_-||_G = 2 delta) and the
    whitened observation change dy = Sigma^(-1/2) (H(c_+) - H(c_-)):

        ratio = ||dy|| / (2 delta),   normalized = ratio / s_1.

    For a map that is linear along v_i, ratio = s_i (0 on the null space); the
    excess over s_i is the map's nonlinearity at amplitude delta. `normalized`
    is on the scale of the normalized spectrum and does not depend on a uniform
    scaling of the noise. Returns `{"delta", "ratio", "normalized", "singular_value"}`.
    """
    m = geometry.V.shape[0]
    if not -m <= direction < m:
        raise ValueError(f"direction: expected an index in [-{m}, {m}), got {direction!r}")
    checks.positive("delta", delta)  # the perturbation amplitude
    c0 = jnp.asarray(c0)
    p = geometry.jacobian.shape[0]
    _, sigma_isqrt = _spd_inverse_sqrt(noise_cov, p, "noise_cov")
    step = np.linalg.solve(geometry.metric_sqrt, geometry.V[:, direction]) * delta
    step = jnp.asarray(step.reshape(c0.shape), c0.dtype)
    dy = np.asarray(observe_fn(c0 + step), np.float64) - np.asarray(observe_fn(c0 - step), np.float64)
    ratio = float(np.linalg.norm(sigma_isqrt @ np.ravel(dy)) / (2 * delta))
    s = geometry.singular_values
    return {
        "delta": float(delta),
        "ratio": ratio,
        "normalized": ratio / float(s[0]),
        "singular_value": float(s[direction]),
    }


def coordinate_blind(geometry: Geometry, noise_cov) -> np.ndarray:
    """Bool `(m,)`: coordinate-wise blind coefficients, whose whitened Jacobian column norm
    ||Sigma^(-1/2) J e_k|| (metric-scaled, G^(-1/2) e_k) is below tau times the largest column norm.

    The coordinate-wise diagnostic of perturbing one coefficient at a time; it can
    find no blind coefficient although the joint map has a null space.
    """
    p, m = geometry.jacobian.shape
    _, sigma_isqrt = _spd_inverse_sqrt(noise_cov, p, "noise_cov")
    cols = np.linalg.norm(sigma_isqrt @ geometry.jacobian @ np.linalg.inv(geometry.metric_sqrt), axis=0)
    return cols < geometry.tau * np.max(cols)


# ----------------------------------------------------------------------------
# Direction-wise recovery


def project(geometry: Geometry, c) -> np.ndarray:
    """Directional coordinates ``d = V^T G^(1/2) c``: `c (..., m) -> (..., m)`."""
    m = geometry.V.shape[0]
    c = np.asarray(c, dtype=np.float64)
    if c.shape[-1:] != (m,):
        raise ValueError(f"c: expected trailing dimension m={m}, got shape {c.shape}")
    return c @ (geometry.metric_sqrt @ geometry.V)


def directional_nrmse(pred_d, true_d) -> np.ndarray:
    """NRMSE per direction `(m,)`: RMS over the test set of pred - true, divided by the test std of true.

    A direction whose test coordinate has zero spread gets NaN (not scorable).
    """
    p = np.asarray(pred_d, np.float64)
    t = np.asarray(true_d, np.float64)
    if p.ndim != 2 or p.shape != t.shape or p.shape[0] < 2:
        raise ValueError(f"pred_d, true_d: expected equal shapes (N >= 2, m), got {p.shape} and {t.shape}")
    rmse = np.sqrt(np.mean((p - t) ** 2, axis=0))
    std = np.std(t, axis=0)
    return np.where(std > 0, rmse / np.where(std > 0, std, 1.0), np.nan)


def hits(geometry: Geometry, nrmse, delta: float = DEFAULT_DELTA) -> np.ndarray:
    """Bool `(m,)`: retained and NRMSE <= delta (NaN NRMSE is never a hit)."""
    e = np.asarray(nrmse, np.float64)
    if e.shape != geometry.retained.shape:
        raise ValueError(f"nrmse: expected shape {geometry.retained.shape}, got {e.shape}")
    checks.positive("delta", delta)  # the tolerance
    return geometry.retained & np.nan_to_num(e <= delta, nan=False)


# ----------------------------------------------------------------------------
# Claims and abstention


def _expected_claimed(confidence: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """`(m + 1,)`: expected number of `positive` among the top j, j = 0..m, ties in random order."""
    m = confidence.size
    out = np.zeros(m + 1)
    values = np.unique(confidence)[::-1]
    done, count = 0, 0.0
    for v in values:
        group = confidence == v
        g, h = int(group.sum()), float(positive[group].sum())
        r = np.arange(1, g + 1)
        # r of the g tied directions, taken in random order, hold h r / g of their hits on average
        out[done + 1 : done + g + 1] = count + h * r / g
        done, count = done + g, count + h
    return out


def auroc(scores, positive) -> Score:
    """P(positive scored above a negative) + P(tie) / 2 (Mann-Whitney); undefined for an empty class."""
    s = np.asarray(scores, np.float64)
    pos = np.asarray(positive, bool)
    k = int(pos.sum())
    if k == 0 or k == s.size:
        return Score(None, f"{'no' if k == 0 else 'only'} positives among {s.size} directions")
    a, b = s[pos][:, None], s[~pos][None, :]
    return Score(float(np.mean((a > b) + 0.5 * (a == b))))


@dataclasses.dataclass(frozen=True)
class Selection:
    """Claim/abstention curves for budgets j = 0..m and their scores (see `selection`).

    `coverage` j / m and the curves `recovery_yield` Y(j), `abstention` Z(j) and their random
    references are `(m + 1,)` over the m directions (the abstention curves None when no
    direction is below threshold); `num_hits` k, `num_retained` R, `num_below` B are counts.
    """

    coverage: np.ndarray
    recovery_yield: np.ndarray
    recovery_yield_random: np.ndarray
    abstention: np.ndarray | None
    abstention_random: np.ndarray | None
    crc_auc: Score
    geometric_auroc: Score
    excess_abstention: Score
    num_hits: int
    num_retained: int
    num_below: int


def selection(confidence, retained, hit) -> Selection:
    """Claim directions in decreasing `confidence`; score recovery and abstention.

    For budget j: Y(j) = E[claimed hits] / m, Z(j) = E[abstained below-threshold] / B,
    random references Y_r(j) = (j / m)(k / m), Z_r(j) = 1 - j / m (k hits, B below).

    * CRC-AUC: (A - A_worst) / (A_best - A_worst) with A = sum_j Y(j) and the
      extremes over orderings of the same hits; equals the AUROC of confidence
      for hits vs non-hits (undefined for k = 0 or k = m).
    * geometric AUROC: confidence, retained vs below-threshold.
    * D = (1/m) sum_j (Z(j) - Z_r(j)) = (R/m)(geometric AUROC - 1/2).
    """
    retained = np.asarray(retained)
    m = retained.size
    retained = _check_mask(retained, m, "retained")
    hit = _check_mask(hit, m, "hit")
    if np.any(hit & ~retained):
        raise ValueError("hit: expected hits only on retained directions")
    u = _check_vector(confidence, m, "confidence")
    k, r = int(hit.sum()), int(retained.sum())
    b = m - r
    j = np.arange(m + 1)
    claimed_hits = _expected_claimed(u, hit)
    y = claimed_hits / m
    y_rand = (j / m) * (k / m)
    if 0 < k < m:
        area = claimed_hits[1:].sum()
        best = np.sum(m - np.arange(1, k + 1) + 1)
        worst = k * (k + 1) / 2
        crc = Score(float((area - worst) / (best - worst)))
    else:
        crc = Score(None, "no recovered directions" if k == 0 else "every direction recovered")
    geo = auroc(u, retained)
    if b > 0:
        z = 1.0 - _expected_claimed(u, ~retained) / b
        z_rand = 1.0 - j / m
        excess = Score(float(np.sum(z - z_rand) / m)) if r > 0 else Score(None, "no retained directions")
    else:
        z = z_rand = None
        excess = Score(None, "no below-threshold directions")
    return Selection(j / m, y, y_rand, z, z_rand, crc, geo, excess, k, r, b)


def claims_at(confidence, budget: int) -> np.ndarray:
    """Expected claim indicator `(m,)` of the top `budget` directions (ties share fractionally)."""
    u = np.asarray(confidence, np.float64)
    m = u.size
    if not 0 <= budget <= m:
        raise ValueError(f"budget: expected an integer in [0, {m}], got {budget!r}")
    out = np.zeros(m)
    for i in range(m):
        out[i] = _expected_claimed(u, np.arange(m) == i)[budget]
    return out


def scrs(claimed, retained, hit) -> Score:
    """sCRS = max(0, claimed hits / R - claimed below-threshold / B) at one operating point.

    `claimed` is a bool or fractional (expected) claim indicator `(m,)`. The
    penalty is 0 when B = 0; undefined when no direction is retained (R = 0).
    """
    retained = np.asarray(retained)
    m = retained.size
    retained = _check_mask(retained, m, "retained")
    hit = _check_mask(hit, m, "hit")
    c = _check_vector(np.asarray(claimed, np.float64), m, "claimed")
    if np.any((c < 0) | (c > 1)):
        raise ValueError("claimed: expected claim indicators in [0, 1]")
    r, b = int(retained.sum()), int((~retained).sum())
    if r == 0:
        return Score(None, "no retained directions")
    penalty = float(np.sum(c[~retained]) / b) if b else 0.0
    return Score(max(0.0, float(np.sum(c[hit]) / r) - penalty))


# ----------------------------------------------------------------------------
# Posterior samplers through the geometry


def linear_posterior_nrmse(geometry: Geometry, prior_cov, noise_cov) -> np.ndarray:
    """Directional NRMSE `(m,)` of the exact posterior mean of the linearized Gaussian problem.

    c ~ N(c0, P) with `prior_cov` P, y = J (c - c0) + N(0, Sigma) with the geometry's
    Jacobian J and `noise_cov` Sigma (each a scalar, a diagonal or a matrix, SPD). The
    posterior covariance is Q = (P^-1 + J^T Sigma^-1 J)^-1, and along the coordinate
    d_i = v_i^T G^(1/2) c (`project`) the mean squared error of the posterior mean over the
    prior is v_i^T G^(1/2) Q G^(1/2) v_i, so its NRMSE is

        sqrt(w_i^T Q w_i / w_i^T P w_i),  w_i = G^(1/2) v_i.

    No estimator of the linearized problem does better in mean square; this is the floor of
    `directional_nrmse` that an estimator trained on prior draws approaches (up to the map's
    nonlinearity): 1 on the exact null space when P is diagonal in V, below 1 where the
    prior correlates a direction with observed ones or the data see it at all.
    """
    m = geometry.V.shape[0]
    p_sqrt, _ = _spd_inverse_sqrt(prior_cov, m, "prior_cov")
    _, sigma_isqrt = _spd_inverse_sqrt(noise_cov, geometry.jacobian.shape[0], "noise_cov")
    a = sigma_isqrt @ geometry.jacobian @ p_sqrt  # whitened by the noise, in prior-standard units
    # Q = P^(1/2) (I + A^T A)^-1 P^(1/2)
    q = p_sqrt @ np.linalg.solve(np.eye(m) + a.T @ a, p_sqrt)
    w = geometry.metric_sqrt @ geometry.V
    prior = p_sqrt @ p_sqrt
    return np.sqrt(np.einsum("ji,jk,ki->i", w, q, w) / np.einsum("ji,jk,ki->i", w, prior, w))


def std_ratios(geometry: Geometry, samples, ref_samples, ref_weights=None) -> dict:
    """Per-direction ratio of sampler to reference posterior std, and per-class medians.

    `samples (N, m)` and `ref_samples (M, m)` are projected with `project`; the
    reference std is weighted by `ref_weights (M,)`. A calibrated sampler has
    ratios near 1 on both classes; compared with the prior, the posterior is
    tight on retained directions and prior-wide on below-threshold ones.
    """
    m = geometry.V.shape[0]
    x = checks.ensemble(samples, "samples", min_size=2)
    y = checks.ensemble(ref_samples, "ref_samples", min_size=2)
    for a, name in ((x, "samples"), (y, "ref_samples")):
        if a.shape[1:] != (m,):
            raise ValueError(f"{name}: expected shape (N, {m}), got {a.shape}")
        checks.finite(a, name)
    w = np.asarray(checks.weights(ref_weights, y.shape[0], "ref_weights", y.dtype), np.float64)
    dx, dy = project(geometry, x), project(geometry, y)
    sx = np.std(dx, axis=0)
    mean_y = w @ dy
    sy = np.sqrt(w @ (dy - mean_y) ** 2)
    ratio = sx / sy
    out = {"ratio": ratio}
    for cls, mask in (("retained", geometry.retained), ("below_threshold", ~geometry.retained)):
        out[cls] = Score(float(np.median(ratio[mask]))) if mask.any() else Score(None, f"no {cls} directions")
    return out


__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_TAU",
    "Geometry",
    "Score",
    "Selection",
    "analyze",
    "auroc",
    "claims_at",
    "coordinate_blind",
    "directional_nrmse",
    "finite_difference_check",
    "from_jacobian",
    "hits",
    "jacobian",
    "linear_posterior_nrmse",
    "perturbation_ratio",
    "project",
    "scrs",
    "selection",
    "std_ratios",
]
