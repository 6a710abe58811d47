"""Task demo: build the benchmark tasks at a small resolution, draw cases, solve and summarize.

    python -m experiments.demo --config=configs/demo.py --workdir=/tmp/demo

Runs in about a minute on one CPU core, downloads nothing. Prints, per task, the
unknown and observation sizes, batched forward-solve throughput, the relative PDE
residual of the solved cases, and the whitened data misfit at the true unknown
(about 1 when the noise model is right). `get_config("tiny")` is the test scale.
"""

import ml_collections

from configs import base


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    tiny = base.is_tiny(arg)
    config = ml_collections.ConfigDict()
    config.tasks = ("darcy", "poisson", "poisson_fixed", "darcy_lowres")
    config.resolution = 32
    config.num_cases = 8
    config.seed = 0
    if tiny:
        config.tasks = ("darcy", "poisson_fixed")
        config.resolution = 16
        config.num_cases = 2
    return config
