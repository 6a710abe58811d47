"""Metrics for generated posterior ensembles.

Modules: `posterior` (posterior matching against a weighted reference),
`scoring` (CRPS, energy score), `calibration` (coverage, conformal, marginal
fidelity, TARP, SBC), `mira` (MIRA score), `diagnostics` (data consistency,
PDE residual, GRF smoothness) and `suite` (everything that applies, in one call).
"""

from posteriorjax.metrics import calibration, diagnostics, mira, posterior, scoring, suite

__all__ = ["calibration", "diagnostics", "mira", "posterior", "scoring", "suite"]
