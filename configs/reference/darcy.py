"""Darcy reference posteriors with the two-ensemble (GT1/GT2) check.

    python -m experiments.reference --config=configs/reference/darcy.py --workdir=/tmp/ref_darcy
    python -m experiments.reference --config=configs/reference/darcy.py:tiny --workdir=/tmp/ref_tiny

Two independent rotation-augmented pools (the named streams `pool_a`, `pool_b` of `seed`) of
`num_chunks * chunk_size * 4` candidates each at 32 x 32; the published eps-rule
(eps = 3e-4, K = 100, sigma = eps / 3) on each gives GT1 and GT2; prior draws
and pCN chains are scored against both and `report.json` holds the worst ratio
per metric and the acceptance rates. Resumable: rerun the same command.
`:64` runs at 64 x 64. The tiny variant (16 x 16, loose eps) runs in seconds.

Measured (`scripts/reference_study.py`, 2 shared CPU cores): at 32 x 32 the
published eps accepts a fraction 9e-5 to 4.4e-4 of the candidates (two cases),
so K = 100 needs 0.25-1.2 million candidates per pool (this config's 1 million
fills K for most cases); at 64 x 64, 3e-5 or less (2 of 65,536 in the better
case), i.e. roughly 3e6-1.5e8 candidates per pool (tail extrapolation). Pool
throughput on 2 idle cores: 1,546 Darcy solves/s at 64 x 64, i.e. about 6,000
augmented candidates/s (`scripts/benchmark.py --only reference_pool`); on the
loaded machine of these measurements 818 candidates/s at 32 x 32 and 100 at
64 x 64. GT1/GT2 ratios at K = 100 came out 1.00-1.16 for the non-spectral
metrics (Kish ESS of each eps-weighted reference 40-65).
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.task = "darcy"
    c.task_options = ml_collections.ConfigDict({"resolution": 32})
    c.seed = 0
    c.progress = True
    c.cases = ml_collections.ConfigDict({"seed": 1234, "num": 2})
    c.pool = ml_collections.ConfigDict({"num_chunks": 50, "chunk_size": 5000, "augment": True})
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
