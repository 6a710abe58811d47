"""Darcy reference posteriors with the two-ensemble (GT1/GT2) check.

    python -m experiments.reference --config=configs/reference/darcy.py --workdir=/tmp/ref_darcy
    python -m experiments.reference --config=configs/reference/darcy.py:tiny --workdir=/tmp/ref_tiny

Two independent rotation-augmented pools (seeds 0 and 1) of
`num_chunks * chunk_size * 4` candidates each at 32 x 32; the published eps-rule
(eps = 3e-4, K = 100, sigma = eps / 3) on each gives GT1 and GT2; prior draws
and pCN chains are scored against both and `report.json` holds the worst ratio
per metric and the acceptance rates. Resumable: rerun the same command.
`:64` runs at 64 x 64. The tiny variant (16 x 16, loose eps) runs in seconds.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.task = "darcy"
    c.task_options = ml_collections.ConfigDict({"resolution": 32})
    c.seed = 0
    c.progress = True
    c.cases = ml_collections.ConfigDict({"seed": 1234, "num": 2})
    c.pool = ml_collections.ConfigDict(
        {"num_chunks": 50, "chunk_size": 5000, "augment": True, "store_state": False}
    )
    c.eps_rule = ml_collections.ConfigDict({"enabled": True, "eps": 3e-4, "num": 100, "sigma": 0.0})
    c.importance = ml_collections.ConfigDict({"enabled": True, "num": 1000, "per_point": False})
    c.exact = ml_collections.ConfigDict({"enabled": False, "num": 1000})
    c.mcmc = ml_collections.ConfigDict(
        {"enabled": True, "method": "pcn", "num_chains": 32, "num_draws": 10, "burn_in": 500, "thin": 20}
    )
    c.validation = ml_collections.ConfigDict({"two_ensemble": True})
    if arg == "64":
        c.task_options.resolution = 64
    elif arg == "tiny":
        c.task_options.resolution = 16
        c.progress = False
        c.cases.num = 1
        c.pool.num_chunks, c.pool.chunk_size = 3, 200
        c.eps_rule.eps, c.eps_rule.num = 2e-3, 20
        c.importance.num = 50
        c.mcmc.num_chains, c.mcmc.num_draws, c.mcmc.burn_in, c.mcmc.thin = 4, 4, 20, 2
    elif arg not in (None, ""):
        raise ValueError(f"config argument: expected '', '64' or 'tiny', got {arg!r}")
    return c
