"""Export a study: `python -m experiments.export --config=configs/<name>.py --workdir=DIR`.

Writes DIR/exchange/<task>/{cases,truth,reference}.{npz,h5} and README.json per task
(`posteriorjax.exchange.export`), building or reusing the sweep's reference cache in
DIR/references/ and DIR/config.json (the same config resumes, another is refused). Score a
sampler's samples with `python -m experiments.evaluate --workdir=DIR --task=T --samples=PATH`.
"""

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli, console

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections sweep config.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (shared with the sweep and evaluate).")
_H5 = flags.DEFINE_bool("h5", True, "Also write the .h5 files (needs h5py: the exchange extra).")
_PLUGINS = console.define_plugins_flag()


def main(argv):
    del argv
    from posteriorjax import plugins  # the registries (and JAX): only once --help is past
    from posteriorjax.exchange import export

    console.setup_logging()
    plugins.load(_PLUGINS.value)
    for task, directory in export(_CONFIG.value, _WORKDIR.value, progress=True, h5=_H5.value).items():
        print(f"{task}: {directory}")


def entry(argv=None):
    """`posteriorjax export` (`cli.execute`: help, one-line user errors, XLA cache)."""
    cli.execute(main, argv, doc=__doc__, required=["config", "workdir"], compilation_cache=True)


if __name__ == "__main__":
    entry()
