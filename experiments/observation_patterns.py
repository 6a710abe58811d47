"""Observation-pattern transfer: the whole protocol, resumable per (family, model).

    python -m experiments.observation_patterns --config=configs/observation_patterns.py[:tiny] --workdir=DIR

See `posteriorjax.studies.transfer.pipeline.run` and `configs/observation_patterns.py`.
"""

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli, console
from posteriorjax.studies.transfer import pipeline

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (resumed when it holds results).")


def main(argv):
    del argv
    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    pipeline.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    cli.execute(
        main, doc=__doc__, required=["config", "workdir"], reserve_cpu_threads=True, compilation_cache=True
    )
