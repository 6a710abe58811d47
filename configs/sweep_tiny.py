"""A minimal sweep: the prior baseline against the exact posterior of `poisson_fixed`.

python -m experiments.sweep --config=configs/sweep_tiny.py --workdir=/tmp/sweep-tiny
"""

import ml_collections

from posteriorjax import sweep


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    del arg
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0,)
    config.num_cases = 2
    config.num_samples = 16
    config.chunk_size = 8
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {"poisson_fixed": {"resolution": 16}}
    config.reference = sweep.reference_config("exact", num_samples=64)
    config.samplers = {"prior": {"options": {}, "axes": {}}}
    return config
