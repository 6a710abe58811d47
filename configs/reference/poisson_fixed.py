"""Poisson (fixed GRF) references checked against the exact Gaussian posterior.

    python -m experiments.reference --config=configs/reference/poisson_fixed.py --workdir=/tmp/ref_pf

At 32 x 32 with the published observation (128 sensors, noise 1e-4): an
augmented pool, the published eps-rule reference and the Bayesian importance
reference, each compared with the closed-form posterior mean and std
(`report.json` -> cases[i].agreement). The tiny variant runs in seconds.
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
        c.eps_rule.eps = 1e-3
    elif arg not in (None, ""):
        raise ValueError(f"config argument: expected '' or 'tiny', got {arg!r}")
    return c
