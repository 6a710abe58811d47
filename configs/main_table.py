"""The main benchmark table: tasks x samplers x the five posterior metrics (+ CRPS, time).

    python -m experiments.sweep --config=configs/main_table.py --workdir=DIR         # published scale
    python -m experiments.sweep --config=configs/main_table.py:tiny --workdir=DIR    # one CPU

Published scale: Darcy and Poisson at 128 x 128 (128 sensors, noise 1e-4), CCS on its
64 x 200 radial grid (two well columns, noise 0.04) and LTMI at 64 x 64 (16 x 16 pooled
transmittance, noise 0.01); 50 cases x 100 samples per sampler, every sampler at its
published profile (`profile="published"` for FunDPS, Fun-DDPS and DiffusionPDE: the
PosteriorBench evaluation code's update, units, noise and per-task values; `configs/base.py`),
their diffusion priors trained as published (data std 0.5, sigma_data 0.5, RBF-kernel noise
for FunDPS / Fun-DDPS, white noise and a U-Net for DiffusionPDE), networks at full scale.
One reference method serves every task here, so it is the pool's Gaussian-likelihood
weighting with each task's own noise (`importance`, `per_point=True`: weights
exp(-MSE / (2 sigma^2)), the weighting of the published eps rule and of the CCS
reference), resampled to 100 members; the pure eps-rule studies on Poisson are
`guidance_calibration.py` and `noise_levels.py`. `exact` is left out (it needs a
linear-Gaussian task: `poisson_fixed`, see `quickstart.py`); samplers that need point
observations (ECI) run on Darcy and Poisson only.

Tiny: Darcy and Poisson at 16 x 16 (CCS and LTMI forward solves and their networks are
too slow for a CPU-minutes run), 2 cases x 16 samples, tiny networks (300 steps), short
sampler schedules (`configs/base.py`), a 4096-candidate pool. Expect the ranking of the
published table only at full scale.
"""

from configs import base
from posteriorjax import sweep

SAMPLERS = ("prior", "pcn", "esmda", "dps", "fundps", "funddps", "ddis", "diffusionpde", "eci", "mc_dropout")
POINT_OBSERVATION_TASKS = ("darcy", "poisson")


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    if tiny:
        tasks = {"darcy": {"resolution": 16}, "poisson": {"resolution": 16}}
        reference = sweep.reference_config(
            "importance", num_samples=64, pool_size=4096, pool_chunk=1024, per_point=True
        )
    else:
        tasks = {"darcy": {"resolution": 128}, "poisson": {"resolution": 128}, "ccs": {}, "ltmi": {}}
        reference = sweep.reference_config(
            "importance", num_samples=100, pool_size=1_000_000, pool_chunk=10_000, per_point=True
        )
    return base.sweep(
        tiny,
        tasks=tasks,
        reference=reference,
        samplers=base.catalog(tiny, SAMPLERS, tasks={"eci": POINT_OBSERVATION_TASKS}, profile="published"),
    )
