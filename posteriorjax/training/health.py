"""Whether a trained model is usable: its training losses and the spread of its predictions.

The studies that train many small models (observation-pattern transfer, observation
geometry) mark a model invalid, with the reason, when

  * its training loss is non-finite, or its final loss (mean of the last tenth of the
    steps) exceeds `LOSS_GROWTH_MAX` (1.25) times its initial loss (mean of the first
    tenth): **diverged**;
  * its final loss is less than `LOSS_REDUCTION_MIN` (1 %) below the initial one:
    **stayed at its initial loss**;
  * the median of its prediction spread ratios (prediction spread over target spread, a
    study's own definition) is below `COLLAPSE_RATIO` (1e-2): a **near-constant**
    prediction.

The two loss thresholds are PDE-OBS's training gate (`configs/campaign/
all_pde_one_setting_10method_9x9.yaml`, `preflight.loss_gate`: maximum final / first
ratio 1.25, minimum relative reduction 0.01); PDE-OBS flags an output / target std ratio
below 1e-4 while training (`src/pdeobs/training.py`, `constant_output_collapse`) and below
1e-3 in its preflight; ours, 1e-2 on the median over records, is the looser flag for a
prediction that is nearly constant where its target is not.
"""

from __future__ import annotations

import numpy as np

LOSS_GROWTH_MAX = 1.25
LOSS_REDUCTION_MIN = 0.01
COLLAPSE_RATIO = 1e-2


def training_problem(losses) -> str | None:
    """Why a model with training losses `(steps,)` is invalid (diverged, or stayed at its
    initial loss; module doc), or None. Initial / final: means of the first / last tenth."""
    losses = np.asarray(losses, np.float64).ravel()
    if losses.size == 0:
        raise ValueError("losses: expected at least one training loss, got none")
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        return f"diverged: non-finite training loss from step {int(bad[0])}"
    window = max(1, losses.size // 10)
    initial, final = float(np.mean(losses[:window])), float(np.mean(losses[-window:]))
    if final > LOSS_GROWTH_MAX * initial:
        return (
            f"diverged: final training loss {final:.3g} is {final / max(initial, 1e-300):.3g} x "
            f"the initial {initial:.3g} (limit {LOSS_GROWTH_MAX:g})"
        )
    if initial - final < LOSS_REDUCTION_MIN * initial:
        return (
            f"stayed at its initial loss: {initial:.3g} -> {final:.3g} "
            f"(less than {100 * LOSS_REDUCTION_MIN:g} % lower)"
        )
    return None


def spread_problem(ratios, what: str = "spread ratio") -> str | None:
    """'near-constant prediction' when the median of the spread `ratios` is below
    `COLLAPSE_RATIO` (or not finite), else None; `what` names the ratio in the reason."""
    median = float(np.median(np.asarray(ratios, np.float64)))
    if not np.isfinite(median) or median < COLLAPSE_RATIO:
        return f"near-constant prediction: median {what} {median:.2g} < {COLLAPSE_RATIO:g}"
    return None
