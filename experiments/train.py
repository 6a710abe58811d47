"""Train a network of a registered kind (`posteriorjax.training.kinds`):

    python -m experiments.train --config=configs/train/network.py:task=darcy,kind=joint[,tiny] --workdir=DIR

Resumes from the latest checkpoint in DIR. Writes DIR/config.json, provenance.json,
metrics.jsonl, checkpoints/ and, once finished, scores.json (the network's own scores,
`posteriorjax.training.scores`), which it prints.
"""

from absl import flags
from ml_collections import config_flags

from posteriorjax import cli, console

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections training config.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and metrics (resumed from).")
_PLUGINS = console.define_plugins_flag()  # out-of-tree tasks to train for


def main(argv):
    del argv
    from posteriorjax import plugins, training  # the registries (and JAX): only once --help is past

    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    plugins.load(_PLUGINS.value)
    config, workdir = _CONFIG.value, _WORKDIR.value
    training.run(config, workdir)
    report = training.scores.read(workdir)
    if report is None:
        print(f"{config.kind}: no scores (this kind or config has none)", flush=True)
    else:
        print(
            f"{config.kind} on {config.task}, {report['training_steps']} steps, "
            f"{report['num_parameters']:,} parameters; scores (floor):",
            flush=True,
        )
        print(training.scores.describe(report), flush=True)


def entry(argv=None):
    """`posteriorjax train` (`cli.execute`: help, one-line user errors, CPU threads, XLA cache)."""
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
