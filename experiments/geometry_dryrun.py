"""Dry run of the learned geometry study: `posteriorjax.studies.geometry.dryrun`.

    python -m experiments.geometry_dryrun [--config=configs/geometry.py]

Prints, per (configuration, family) block of the config's learned section (default: the full
scale, 5 configurations x 6 families, 5 seeds x 5 members, 3000 steps), the parameters, the data
and member-state memory, the FLOPs per epoch and in all, and the hours at the matmul roofline of
every device kind with a benchmark in `results/benchmarks/`. Nothing is trained or simulated.
"""

from ml_collections import config_flags

from posteriorjax import cli
from posteriorjax.studies.geometry import dryrun

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/geometry.py", "ml_collections config file.", lock_config=True
)


def main(argv):
    del argv
    print(dryrun.table(_CONFIG.value))


if __name__ == "__main__":
    cli.execute(main, doc=__doc__)
