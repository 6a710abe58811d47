"""End-to-end demo: build tasks, draw cases, solve, print a summary.

python -m experiments.demo --config=configs/demo.py [--workdir=DIR] [--plugins=mod1,mod2]
"""

from absl import app, flags
from ml_collections import config_flags

from posteriorjax import console, parallel, plugins
from posteriorjax.studies import demo

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the summary (optional).")
_PLUGINS = plugins.define_flag()


def main(argv):
    del argv
    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    plugins.load(_PLUGINS.value)
    demo.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    parallel.reserve_cpu_threads()  # before JAX starts (several CPU devices; see parallel)
    parallel.enable_compilation_cache()  # persistent XLA cache, ~/.cache/posteriorjax/xla (see parallel)
    flags.mark_flags_as_required(["config"])
    app.run(main)
