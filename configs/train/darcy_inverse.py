"""Train the direct inverse FNO with MC dropout of the ``darcy`` task.

Inputs: masked observations on the grid + mask; output: the unknown.

    python -m experiments.train \
        --config=configs/train/darcy_inverse.py:tiny --workdir=/tmp/darcy_inverse

``:tiny`` (16 x 16, 300 steps) takes about a minute on one CPU; without it the run is the
full 128 x 128 benchmark-sized model for a GPU. See `configs/train/common.py`.
"""

from configs.train import common


def get_config(arg=None):
    return common.config("darcy", "inverse", arg)
