"""Build (or resume) prior pools and reference posteriors for one task.

python -m experiments.reference --config=configs/reference/darcy.py --workdir=DIR
"""

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli, console

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (resumed when it exists).")


def main(argv):
    del argv
    from posteriorjax.reference import pipeline

    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    pipeline.run(_CONFIG.value, _WORKDIR.value)


def entry(argv=None):
    """`posteriorjax reference` (`cli.execute`: help, one-line user errors, CPU threads, XLA cache)."""
    cli.execute(
        main,
        argv,
        doc=__doc__,
        required=["config", "workdir"],
        reserve_cpu_threads=True,
        compilation_cache=True,
    )


if __name__ == "__main__":
    entry()
