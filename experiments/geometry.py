"""Observation geometry of the interface tasks: `posteriorjax.studies.geometry.study`.

    python -m experiments.geometry --config=configs/geometry.py[:tiny] --workdir=DIR

Writes `summary.md` (Tables 1-4), `results.json` and `figures/` in DIR.
"""

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli, console
from posteriorjax.studies.geometry import study

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")


def main(argv):
    del argv
    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    study.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    cli.execute(main, doc=__doc__, required=["config"], reserve_cpu_threads=True, compilation_cache=True)
