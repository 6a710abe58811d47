"""Observation geometry of the interface tasks: `posteriorjax.studies.geometry.study`.

    python -m experiments.geometry --config=configs/geometry.py[:tiny] --workdir=DIR

Writes `summary.md` (Tables 1-4), `results.json` and `figures/` in DIR.
"""

from absl import app, flags
from ml_collections import config_flags

from posteriorjax import console, parallel
from posteriorjax.studies.geometry import study

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")


def main(argv):
    del argv
    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    study.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
    parallel.enable_compilation_cache()  # persistent XLA cache, ~/.cache/posteriorjax/xla (see parallel)
    flags.mark_flags_as_required(["config"])
    app.run(main)
