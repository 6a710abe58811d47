"""Rejection and importance-weighted references from a prior pool.

Two rules, both reading only the pool's stored noise-free observations `y (N, M)`
(chunk by chunk) and gathering the selected fields at the end:

* `eps_rule` — the published posterior-matching rule, kept for comparability:
  accept candidate j when MAE_j = ||y_j - y_obs||_1 / M <= eps, keep `num`
  (K = 100) accepted at random, weight w_j ∝ exp(-MAE_j^2 / (2 sigma^2)) with
  sigma = eps / 3 by default, normalized. It is *not* the Bayesian posterior:
  the hard threshold and the MAE-based weight are a kernel-ABC approximation
  whose bias the exact Poisson posterior measures (`validate.exact_agreement`).
* `importance` — the Bayesian rule: self-normalized importance sampling with the
  prior as proposal, log w_j = log p(y_obs | x_j) = -||(y_j - y_obs)/sigma||^2 / 2
  (+ const) from the task's Gaussian noise model; with `per_point=True` the
  CCS-style normalized likelihood exp(-||y_j - y_obs||^2 / (2 sigma^2 M)). Reports
  the Kish effective sample size (sum w)^2 / sum w^2 and returns either a
  systematic resample of any size (equal weights) or the weighted candidates.
"""

from __future__ import annotations

import math

import numpy as np

from posteriorjax import checks
from posteriorjax.reference.store import Reference


def _check_y(y_obs, m: int) -> np.ndarray:
    y = np.asarray(y_obs, np.float64)
    if y.shape != (m,):
        raise ValueError(f"y_obs: expected shape ({m},) matching the pool's observations, got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y_obs: expected finite values")
    return y


def pool_statistic(pool, fn) -> np.ndarray:
    """`fn(y_chunk (B, M)) -> (B, ...)` over every finished chunk of `pool`, concatenated `(N, ...)`."""
    chunks = pool.iter_chunks(("y",))
    return np.concatenate([fn(np.asarray(arrays["y"], np.float64)) for _, arrays in chunks])


def mean_absolute_error(y_pool, y_obs) -> np.ndarray:
    """MAE_j = mean_m |y_pool[j, m] - y_obs[m]|, `(N,)`.

    Broadcasts: `y_pool (N, 1, M)` against several observations `y_obs (K, M)` gives `(N, K)`.
    """
    return np.mean(np.abs(np.asarray(y_pool, np.float64) - y_obs), axis=-1)


def _fill_eps(mae, eps: float, num: int) -> float:
    """`eps`, widened to the `num`-th smallest MAE where fewer than `num` candidates pass it."""
    mae = np.asarray(mae, np.float64)
    if mae.size < num:
        raise ValueError(f"num: asked to keep K={num} from a pool of only {mae.size} candidates")
    return max(float(eps), float(np.partition(mae, num - 1)[num - 1]))


def eps_select(rng: np.random.Generator, mae, *, eps: float, num: int = 100, sigma: float | None = None):
    """The published selection on precomputed MAE `(N,)` -> (indices `(num,)`, weights `(num,)`, rate).

    ValueError if fewer than `num` candidates pass, with the acceptance rate and
    the pool size that would be needed.
    """
    eps = checks.positive("eps", eps)
    sigma = eps / 3.0 if sigma is None else checks.positive("sigma", sigma)
    num = checks.positive_int("num", num)
    mae = np.asarray(mae, np.float64)
    accepted = np.flatnonzero(mae <= eps)
    rate = accepted.size / max(mae.size, 1)
    if accepted.size < num:
        need = f"about {math.ceil(num / rate):,}" if rate > 0 else f"more than {mae.size * num:,}"
        raise ValueError(
            f"num: asked to keep K={num} but only {accepted.size} of {mae.size:,} candidates have "
            f"MAE <= eps={eps:g} (acceptance rate {rate:.3g}); a pool of {need} candidates "
            "would be needed (or a larger eps)"
        )
    keep = np.sort(rng.choice(accepted, size=num, replace=False))
    logw = -(mae[keep] ** 2) / (2 * sigma**2)
    w = np.exp(logw - logw.max())  # shifted by the largest: the best candidate's weight never underflows
    return keep, w / w.sum(), rate


def eps_rule(
    pool, y_obs, *, seed: int, eps: float, num: int = 100, sigma: float | None = None, fill: bool = False
) -> Reference:
    """Published eps-rule reference for one case from a `pool.Pool`.

    `fill=True` (our variant, not the published rule): where fewer than `num` candidates
    pass `eps`, eps (and sigma = eps / 3 unless given) widens to the `num`-th smallest MAE;
    `info["eps"]` is the eps used, `info["eps_requested"]` the one asked for.
    """
    eps = checks.positive("eps", eps)
    y = _check_y(y_obs, pool.read_chunk(pool.done_chunks()[0], ("y",))["y"].shape[1])
    mae = pool_statistic(pool, lambda yc: mean_absolute_error(yc, y))
    requested = eps
    if fill:
        eps = _fill_eps(mae, eps, num)
    idx, w, rate = eps_select(np.random.default_rng(seed), mae, eps=eps, num=num, sigma=sigma)
    info = {
        "eps_requested": requested,
        "kish_ess": float(1.0 / np.sum(w**2)),
        "eps": eps,
        "sigma": eps / 3.0 if sigma is None else float(sigma),
        "pool_size": int(mae.size),
        "accepted": int(round(rate * mae.size)),
        "acceptance_rate": rate,
    }
    return Reference(pool.gather(idx), w.astype(np.float64), "eps_rule", seed, info)


def gaussian_log_weights(y_pool, y_obs, noise_std, *, per_point: bool = False) -> np.ndarray:
    """Unnormalized log-likelihood weights `(N,)`: -||(y_j - y_obs)/sigma||^2 / (2 [M if per_point])."""
    std = np.asarray(noise_std, np.float64)
    if not (np.all(np.isfinite(std)) and np.all(std > 0)):
        raise ValueError(f"noise_std: expected finite values > 0, got {std}")
    r = (np.asarray(y_pool, np.float64) - y_obs) / std
    q = 0.5 * np.sum(r**2, axis=-1)
    return -q / r.shape[-1] if per_point else -q


def normalize_log_weights(log_w) -> tuple[np.ndarray, float]:
    """Normalized weights `(N,)` and the Kish effective sample size."""
    log_w = np.asarray(log_w, np.float64)
    w = np.exp(log_w - log_w.max())  # shifted: at a small noise every raw likelihood underflows to 0
    w /= w.sum()
    return w, float(1.0 / np.sum(w**2))


def systematic_resample(rng: np.random.Generator, weights, num: int) -> np.ndarray:
    """Systematic resampling: `num` indices, index j appearing floor or ceil of num * w_j times."""
    num = checks.positive_int("num", num)
    cdf = np.cumsum(np.asarray(weights, np.float64))
    cdf[-1] = 1.0  # a round-off total below 1 would let a u near 1 fall past the last index
    u = (rng.uniform() + np.arange(num)) / num
    return np.searchsorted(cdf, u, side="right")


def importance(
    pool,
    y_obs,
    noise_std,
    *,
    seed: int,
    num: int | None = 1000,
    per_point: bool = False,
    max_members: int = 10_000,
) -> Reference:
    """Bayesian importance-weighted reference from a `pool.Pool`.

    With `num`, a systematic resample of `num` equally weighted members;
    with `num=None`, the `max_members` heaviest candidates with their
    (renormalized) weights; `info["truncated_mass"]` is the weight dropped.
    `info["ess"]` is the effective sample size of the full pool.
    """
    y = _check_y(y_obs, pool.read_chunk(pool.done_chunks()[0], ("y",))["y"].shape[1])
    log_w = pool_statistic(pool, lambda yc: gaussian_log_weights(yc, y, noise_std, per_point=per_point))
    w, ess = normalize_log_weights(log_w)
    info = {"pool_size": int(w.size), "ess": ess, "per_point": per_point, "max_weight": float(w.max())}
    rng = np.random.default_rng(seed)
    if num is not None:
        idx = systematic_resample(rng, w, num)
        return Reference(pool.gather(idx), np.full(num, 1.0 / num), "importance", seed, info)
    order = np.argsort(-w)[:max_members]
    kept = w[order]
    info["truncated_mass"] = float(1.0 - kept.sum())
    idx = np.sort(order)
    return Reference(pool.gather(idx), w[idx] / w[idx].sum(), "importance", seed, info)
