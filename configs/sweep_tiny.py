"""A minimal sweep on `poisson_fixed` at 16 x 16 against its exact posterior.

    python -m experiments.sweep --config=configs/sweep_tiny.py --workdir=/tmp/sweep-tiny

The prior baseline, the exact sampler, the exact sampler of a misspecified model
(noise std 100 x too large) and ES-MDA over a small noise-inflation axis, scored
on 4 cases with 16 samples each, with the PDE-residual and GRF-exponent
diagnostics. Writes `results.jsonl`, `summary.md` (main table and calibration
over cases), stored samples of case 0 and figures; takes a few minutes on one
CPU core (mostly compilation). Expected: `exact` best on every posterior metric,
`exact_noise_x100` and `prior` far behind, MIRA of `exact` inside its
calibrated band; with 4 cases the calibration table's TARP curve has a single
bin, so read TARP from a study with tens of cases.
"""

import ml_collections
from ml_collections import config_dict

from posteriorjax import sweep


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    del arg
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0,)
    config.num_cases = 4
    config.num_samples = 16
    config.chunk_size = 8
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {"poisson_fixed": {"resolution": 16}}
    config.reference = sweep.reference_config("exact", num_samples=64)
    # per-task reference sections (`sweep.settings`); none here: every task uses `reference`
    config.references = {}
    config.samplers = {
        "prior": {},
        "exact": {},
        "exact_noise_x100": {"sampler": "exact", "task_options": {"noise_std": 1e-2}},
        "esmda": {"axes": {"noise_inflation": (1.0, 4.0)}},
    }
    # a placeholder keeps `--config.training.num_steps=N` overridable from the command line
    config.training = {"scale": "tiny", "num_steps": config_dict.placeholder(int)}
    config.diagnostics = ("pde_residual", "alpha")
    config.save_samples = 1
    config.figures = True
    return config
