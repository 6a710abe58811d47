"""End-to-end demo: build tasks, draw cases, solve, print a summary.

python -m experiments.demo --config=configs/demo.py [--workdir=DIR] [--plugins=mod1,mod2]
"""

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli, console
from posteriorjax.studies import demo

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the summary (optional).")
_PLUGINS = console.define_plugins_flag()


def main(argv):
    del argv
    from posteriorjax import plugins  # the registries (and JAX): only once --help is past

    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    plugins.load(_PLUGINS.value)
    demo.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    cli.execute(main, doc=__doc__, required=["config"], reserve_cpu_threads=True, compilation_cache=True)
