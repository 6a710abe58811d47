"""Dry run of the full observation-pattern scale: `posteriorjax.studies.transfer.dryrun`.

    python -m experiments.observation_patterns_dryrun [--resolution=128] [--compile]

Prints, per learned model and task (a block: nine views + MIX in one program), the parameter
count, the network calls per record (3 for the forecasting rollout), the batch, the data and
ten-model state memory, (with `--compile`) the XLA memory of one compiled training step, the
FLOPs per epoch and the hours of the 500 epochs at the matmul roofline of every device kind with
a benchmark in `results/benchmarks/`. Nothing is trained.
"""

from absl import flags

from posteriorjax import cli
from posteriorjax.studies.transfer import dryrun

_RESOLUTION = flags.DEFINE_integer("resolution", 128, "Grid points per axis.")
_COMPILE = flags.DEFINE_bool("compile", False, "Also compile one training step per block.")


def main(argv):
    del argv
    print(dryrun.table(_RESOLUTION.value, _COMPILE.value))


if __name__ == "__main__":
    cli.execute(main, doc=__doc__)
