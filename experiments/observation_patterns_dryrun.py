"""Dry run of the full observation-pattern scale: `posteriorjax.studies.transfer.dryrun`.

    python -m experiments.observation_patterns_dryrun [--resolution=128] [--compile]

Prints, per learned model and task, the parameter count, the nine-view state memory, the batch
and (with `--compile`) the XLA memory of one compiled nine-view training step.
"""

from absl import flags

from posteriorjax import cli
from posteriorjax.studies.transfer import dryrun

_RESOLUTION = flags.DEFINE_integer("resolution", 128, "Grid points per axis.")
_COMPILE = flags.DEFINE_bool("compile", False, "Also compile one nine-view training step per model.")


def main(argv):
    del argv
    print(dryrun.table(_RESOLUTION.value, _COMPILE.value))


if __name__ == "__main__":
    cli.execute(main, doc=__doc__)
