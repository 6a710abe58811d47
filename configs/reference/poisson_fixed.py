"""Poisson (fixed GRF) references checked against the exact Gaussian posterior.

    python -m experiments.reference --config=configs/reference/poisson_fixed.py --workdir=/tmp/ref_pf

At 32 x 32 with the published observation (128 sensors, noise 1e-4): an
augmented pool, the published eps-rule reference and the Bayesian importance
reference, each compared with the closed-form posterior mean and std
(`report.json` -> cases[i].agreement). The tiny variant (16 x 16, a 2,400-candidate pool)
runs in seconds; its eps is 3e-3 because no candidate of that pool comes within 1e-3 of the
observation (at 3e-3, 73 of 2,400 pass: acceptance 3.0%).

Expected (measured with `scripts/reference_study.py poisson`, three cases): no
candidate of a 524,288 pool reaches the published eps = 3e-4 (smallest MAE
4.7e-4 to 5.9e-4); with the eps that fills K = 100 (6.5e-4 to 1.0e-3) the
eps-rule ensemble has relative mean error 0.23-0.61 and a pointwise std 2.7-3x
the exact one. The Bayesian importance reference has ESS ~ 1 at this noise:
KL(posterior || prior) is 78-88 nats, so a prior pool would need ~exp(KL) ~ 1e34
candidates; the exact reference is the only usable one here.
"""

import ml_collections

from configs.reference import darcy


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    c = darcy.get_config("tiny" if arg == "tiny" else None)
    c.task = "poisson_fixed"
    c.task_options = ml_collections.ConfigDict({"resolution": 16 if arg == "tiny" else 32})
    c.exact.enabled = True
    c.mcmc.enabled = False
    c.validation.two_ensemble = False
    if arg == "tiny":
        c.eps_rule.eps = 3e-3
    elif arg not in (None, ""):
        raise ValueError(f"config argument: expected '' or 'tiny', got {arg!r}")
    return c
