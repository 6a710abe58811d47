"""Metrics for generated posterior ensembles.

Modules: `posterior` (posterior matching against a weighted reference),
`scoring` (CRPS, energy score), `calibration` (coverage, conformal, marginal
fidelity, TARP, SBC), `mira` (MIRA score), `geometry` (observation-Jacobian
recoverability), `diagnostics` (data consistency, PDE residual, GRF
smoothness) and `suite` (everything that applies, in one call).
"""

from posteriorjax.metrics import calibration, diagnostics, geometry, mira, posterior, scoring, suite

__all__ = ["calibration", "diagnostics", "geometry", "mira", "posterior", "scoring", "suite"]
