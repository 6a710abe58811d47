"""Train the conditional flow (``fundiff``: amortized p(x | y)) of the ``darcy`` task.

Inputs: the flow state, its time and the masked observations on the grid + mask; output: the
velocity over the normalized unknown (`posteriorjax.samplers.fundiff`).

    python -m experiments.train \
        --config=configs/train/darcy_fundiff.py:tiny --workdir=/tmp/darcy_fundiff

``:tiny`` (16 x 16, 300 steps) takes about a minute on one CPU; without it the run is the
full 128 x 128 model for a GPU. Sample with
``samplers.get("fundiff", task, model=ema_model)``. See `configs/train/common.py`.
"""

from configs.train import common


def get_config(arg=None):
    return common.config("darcy", "fundiff", arg)
