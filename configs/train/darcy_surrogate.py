"""Train the FNO forward surrogate (unknown -> state) of the ``darcy`` task.

    python -m experiments.train \
        --config=configs/train/darcy_surrogate.py:tiny --workdir=/tmp/darcy_surrogate

``:tiny`` (16 x 16, 300 steps) takes about a minute on one CPU; without it the run is the
full 128 x 128 benchmark-sized model for a GPU. See `configs/train/common.py`.
"""

from configs.train import common


def get_config(arg=None):
    return common.config("darcy", "surrogate", arg)
