"""The Bayes-linear floor of the learned geometry study: `posteriorjax.studies.geometry.study.floor_table`.

    python -m experiments.geometry_floor [--config=configs/geometry.py:medium]

Prints, per learning configuration, the directional NRMSE that the exact posterior mean of the
problem linearized at the prior mean reaches (what a trained estimator approaches), the hits and
below-threshold claims at that floor, and the geometric AUROC of its conformal widths. Nothing is
trained; each configuration costs one Jacobian.
"""

from ml_collections import config_flags

from posteriorjax import cli
from posteriorjax.studies.geometry import study

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/geometry.py", "ml_collections config file.", lock_config=True
)


def main(argv):
    del argv
    print(study.floor_table(_CONFIG.value)[0])


if __name__ == "__main__":
    cli.execute(main, doc=__doc__)
