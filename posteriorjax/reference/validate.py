"""Validation of references: the two-ensemble consistency check and agreement with exact posteriors.

Two-ensemble check (posterior-matching benchmark, Table 6): build two references
GT1 and GT2 independently at equal budget (disjoint pools), score the same
sampler ensembles against both with the metric suite, and report per metric
r_m = max(m_GT1 / m_GT2, m_GT2 / m_GT1), worst over ensembles; r_m near 1 says the
reference's Monte Carlo error is small next to what the metric resolves (the
published target is < 1.08 for every non-spectral metric).

Exact agreement: a reference's weighted pointwise mean and std against a closed-
form posterior (`exact.posterior`), as relative L2 errors, and the suite's
distributional metrics against exact posterior draws.
"""

from __future__ import annotations

import numpy as np

from posteriorjax.metrics import posterior as pmetrics
from posteriorjax.metrics import registry, suite

RATIO_METRICS = registry.POSTERIOR


def _ratio(a: float, b: float) -> float:
    if not (np.isfinite(a) and np.isfinite(b)) or a <= 0 or b <= 0:
        return float("nan")
    return float(max(a / b, b / a))


def two_ensemble_ratios(ensembles: dict, ref1, ref2, *, task=None, metrics=RATIO_METRICS) -> dict:
    """Worst-case GT1/GT2 ratio per metric over the `ensembles` `{name: (N, C, H, W)}`.

    `ref1`, `ref2`: `store.Reference`s of the same case. Returns
    ``{"ratios": {metric: worst r}, "per_ensemble": {name: {metric: (m1, m2, r)}}}``.
    """
    if not ensembles:
        raise ValueError("ensembles: expected at least one sampler ensemble")
    per, worst = {}, {m: 1.0 for m in metrics}
    for name, samples in ensembles.items():
        r1 = suite.evaluate(samples, ref1.samples, ref1.weights, task=task)
        r2 = suite.evaluate(samples, ref2.samples, ref2.weights, task=task)
        per[name] = {}
        for m in metrics:
            r = _ratio(r1[m], r2[m])
            per[name][m] = (r1[m], r2[m], r)
            # an undefined ratio leaves the worst case undefined: max(nan, r) keeps the NaN
            worst[m] = max(worst[m], r) if np.isfinite(r) else float("nan")
    return {"ratios": worst, "per_ensemble": per}


def exact_agreement(reference, exact_mean, exact_std, *, exact_samples=None, task=None) -> dict:
    """Relative L2 errors of `reference`'s weighted mean/std against the exact posterior `(C, H, W)`.

    With `exact_samples (N, C, H, W)`, also the suite's metrics of the exact
    draws scored against the reference (`exact_vs_ref_*`).
    """
    x = np.asarray(reference.samples, np.float64)
    w = np.asarray(reference.weights, np.float64)
    mu, sd = (np.asarray(a) for a in pmetrics.weighted_moments(x, w))
    mean, std = np.asarray(exact_mean, np.float64), np.asarray(exact_std, np.float64)
    out = {
        "mean_rel_error": float(np.linalg.norm(mu - mean) / np.linalg.norm(mean)),
        "std_rel_error": float(np.linalg.norm(sd - std) / np.linalg.norm(std)),
        "ess": float(1.0 / np.sum(w**2)),
    }
    if exact_samples is not None:
        rec = suite.evaluate(exact_samples, x, w, task=task)
        out.update({f"exact_vs_ref_{m}": rec[m] for m in RATIO_METRICS if m in rec})
    return out
