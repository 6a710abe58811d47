"""Train the direct inverse FNO with MC dropout of the ``poisson_fixed`` task.

Inputs: masked observations on the grid + mask; output: the unknown.

    python -m experiments.train \
        --config=configs/train/poisson_fixed_inverse.py:tiny --workdir=/tmp/poisson_fixed_inverse

``:tiny`` (16 x 16, 300 steps) takes about a minute on one CPU; without it the run is the
full 128 x 128 benchmark-sized model for a GPU. See `configs/train/common.py`.
"""

from configs.train import common


def get_config(arg=None):
    return common.config("poisson_fixed", "inverse", arg)
