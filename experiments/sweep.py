"""Run a sweep: `python -m experiments.sweep --config=configs/<name>.py --workdir=DIR [--config.x=y]`.

Writes DIR/results.jsonl, results.csv, summary.md (main table and calibration over
cases), calibration.json, references.json, references/, samples/, networks/,
figures/, config.json and provenance.json; rerunning with the same config resumes
and skips finished configurations, trained networks and cached references.
With `--distributed` (multi-host: one process per host, a workdir shared by all)
each process writes results.p<k>.jsonl and process 0 assembles results.jsonl.
`--plugins=mod1,mod2` imports modules registering out-of-tree samplers/tasks
(`posteriorjax.plugins`); every process loads them first, before anything is built,
and provenance.json records the list. `--memory_limit_bytes` caps the memory the
compiled programs may need (`sweep.run`); a sweep over it stops before compute, naming
`batch_size` and `num_samples`. `--dry_run` validates the config and prints (as JSON) what it
would build per task: options, reference method, rule, settings, eps and surrogate spec, and the
samplers (`sweep.dry_run`); nothing is computed and no workdir is needed. `--stage=networks`
trains (or resumes) every network the study needs and stops: the long part of a learned study,
run first and interruptible.
"""

import json

from absl import app, flags
from ml_collections import config_flags

from posteriorjax import cli, console, plugins

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections sweep config.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (resumed when it holds the same config).")
_PLUGINS = plugins.define_flag()
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Validate the config and print what it would build (JSON); compute nothing."
)
_STAGE = flags.DEFINE_enum(  # `sweep.STAGES`, spelled out: the sweep (and JAX) load after parsing
    "stage", "all", ["all", "networks"],
    "all: the whole study; networks: train (or resume) every network the study needs, then stop.",
)  # fmt: skip
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (multi-host).")
_MEMORY = flags.DEFINE_integer(
    "memory_limit_bytes", None,
    "Device memory the compiled programs must fit in (default: $POSTERIORJAX_MEMORY_LIMIT_BYTES, the "
    "accelerator's memory, or the machine's RAM); checked before anything expensive is built.",
    lower_bound=1,
)  # fmt: skip


def main(argv):
    del argv
    import jax

    from posteriorjax import sweep

    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    plugins.load(_PLUGINS.value)  # on every process, before anything is built
    if _DRY_RUN.value:
        print(json.dumps(sweep.dry_run(_CONFIG.value), indent=1, default=str))
        return
    if _WORKDIR.value is None:
        raise app.UsageError("--workdir is required (except with --dry_run)")
    if _DISTRIBUTED.value:
        jax.distributed.initialize()
    sweep.run(
        _CONFIG.value, _WORKDIR.value, plugins=_PLUGINS.value, memory_limit_bytes=_MEMORY.value,
        stage=_STAGE.value,
    )  # fmt: skip


def entry(argv=None):
    """`posteriorjax sweep` (`cli.execute`: help, one-line user errors, CPU threads, XLA cache)."""
    cli.execute(
        main, argv, doc=__doc__, required=["config"], reserve_cpu_threads=True, compilation_cache=True
    )


if __name__ == "__main__":
    entry()
