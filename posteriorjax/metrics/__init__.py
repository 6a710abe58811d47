"""Metrics for generated posterior ensembles.

Modules: `posterior` (posterior matching against a weighted reference),
`scoring` (CRPS, energy score), `calibration` (coverage, conformal, marginal
fidelity, TARP, SBC), `mira` (MIRA score), `lc2st` (local classifier
two-sample test), `geometry` (observation-Jacobian recoverability),
`diagnostics` (data consistency, PDE residual, GRF smoothness), `registry`
(one entry per metric the suite records, from which the tables and figures
take their metric lists) and `suite` (everything that applies, in one call).
"""

from posteriorjax.metrics import (
    calibration,
    diagnostics,
    geometry,
    lc2st,
    mira,
    posterior,
    registry,
    scoring,
    suite,
)

__all__ = [
    "calibration",
    "diagnostics",
    "geometry",
    "lc2st",
    "mira",
    "posterior",
    "registry",
    "scoring",
    "suite",
]
