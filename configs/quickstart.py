"""Quickstart: the whole pipeline on one CPU in minutes, nothing downloaded.

    python -m experiments.sweep --config=configs/quickstart.py --workdir=/tmp/quickstart

Two tasks at 32 x 32, each with the reference it deserves:

* `poisson_fixed` (GRF source, linear-Gaussian; the published noise 1e-4): the exact
  posterior (pathwise samples), so every row is scored against the true answer;
* `darcy` (binary permeability): the published eps rule (MAE <= eps, K = 32 kept,
  weights exp(-MAE^2 / (2 (eps/3)^2)), noise std eps / 3) on a rotation-augmented prior
  pool of 16,384 candidates (4,096 draws x 4 rotations) built in the workdir. The
  published eps = 3e-4 needs a pool of about 1e6 at this size (README, "Reference
  posteriors"); eps = 1e-3 fills K from this pool.

Samplers, each scored by the five posterior metrics, CRPS and the pointwise error over
3 cases x 32 samples:

* both tasks: the prior (the uninformed baseline) and ES-MDA;
* `poisson_fixed`: the exact posterior; DPS, FunDPS and DDIS with the exact GRF prior
  score (`prior="oracle"`, no network) and FunDPS with a tiny joint prior trained on
  demand (cached under `workdir/networks/`), over a small guidance sweep: the gap between
  the two FunDPS rows is the error of the learned prior;
* `darcy`: short pCN chains in the prior latent.

Prints the summary table and leaves `summary.md`, `results.csv`, `results.jsonl`,
references, stored samples and figures (`figures/*.png`) in the workdir; rerunning
resumes. `get_config("tiny")` is the test scale (16 x 16, 2 cases, shorter schedules).
"""

import ml_collections

from configs import base
from posteriorjax import sweep

DARCY_EPS = 1e-3  # MAE threshold of the Darcy reference; its noise std is DARCY_EPS / 3
POISSON_NOISE = 1e-4
# FunDPS (our function-space profile: the step preconditioned by C_n) needs smaller weights than
# the white-noise DPS rows: with the exact prior score its optimum at 24 steps on poisson_fixed
# 32^2 lies in this grid; the tiny learned prior's smooth GRF noise (C_n's largest eigenvalues in
# the hundreds) wants smaller ones still
FUNDPS_GUIDANCE = (30.0, 100.0, 300.0)
LEARNED_FUNDPS_GUIDANCE = (1.0, 3.0, 10.0)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    tiny = base.is_tiny(arg)
    res = 16 if tiny else 32
    steps = 8 if tiny else 24
    oracle = {"prior": "oracle", "num_steps": steps}
    samplers = {
        "prior": base.sampler("prior"),
        "esmda": base.sampler("esmda", options={"ensemble_size": 64}),
        "exact": base.sampler("exact", tasks=("poisson_fixed",)),
        "dps_oracle": base.sampler(
            "dps", options=oracle, axes={"guidance": (400.0, 1600.0, 6400.0)}, tasks=("poisson_fixed",)
        ),
        "fundps_oracle": base.sampler(
            "fundps", options=oracle, axes={"guidance": FUNDPS_GUIDANCE}, tasks=("poisson_fixed",)
        ),
        "ddis_oracle": base.sampler(
            "ddis",
            options={
                **oracle,
                "num_steps": 4 if tiny else 10,
                "ode_steps": 2,
                "langevin_steps": 10,
                "forward": "exact",
            },
            axes={"weight": (0.3, 1.0)},
            tasks=("poisson_fixed",),
        ),
        "fundps": base.sampler(
            "fundps",
            options={"num_steps": steps},
            axes={"guidance": LEARNED_FUNDPS_GUIDANCE},
            networks={"model": "joint"},
            tasks=("poisson_fixed",),
        ),
        "pcn": base.sampler(
            "pcn",
            options={"burn_in": 50 if tiny else 150, "num_steps": 50 if tiny else 150},
            tasks=("darcy",),
        ),
    }
    config = base.sweep(
        True,
        tasks={
            "poisson_fixed": {"resolution": res, "noise_std": POISSON_NOISE},
            "darcy": {"resolution": res, "noise_std": DARCY_EPS / 3.0},
        },
        reference=sweep.reference_config("exact", num_samples=64),
        references={
            "darcy": sweep.reference_config(
                "rejection", num_samples=32, pool_size=16384, pool_chunk=2048, augment=True, eps=DARCY_EPS
            )
        },
        samplers=samplers,
    )
    config.num_cases = 2 if tiny else 3
    config.num_samples = 16 if tiny else 32
    config.chunk_size = 16
    config.batch_size = 4
    if tiny:
        config.training.num_steps = 60
    return config
