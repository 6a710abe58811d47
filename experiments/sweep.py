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
samplers (`sweep.dry_run`), and what it would cost (`sweep.sizing`): program and configuration
counts, every network's parameter count (built abstractly), each program's FLOPs per sample and
(`--dry_run_compile`, default on) XLA's per-device memory, the hours at each benchmarked device's
matmul roofline, and per eps-rule reference "fills" / "will not fill (expected k of K)" from a pilot
pool of `--dry_run_pilot` prior draws (on stderr as they finish, in the JSON's `sizing`). Nothing
is trained or sampled and no workdir is needed. `--stage=networks` trains (or resumes) every
network the study needs and stops: the long part of a learned study, run first and interruptible.
"""

import json
import sys

from absl import app, flags
from ml_collections import config_flags

from posteriorjax import cli, console

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections sweep config.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (resumed when it holds the same config).")
_PLUGINS = console.define_plugins_flag()
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Validate the config and print what it would build (JSON); compute nothing."
)
_STAGE = flags.DEFINE_enum(  # `sweep.STAGES`, spelled out: the sweep (and JAX) load after parsing
    "stage",
    "all",
    ["all", "networks"],
    "all: the whole study; networks: train (or resume) every network the study needs, then stop.",
)
_DRY_RUN_SIZING = flags.DEFINE_bool(
    "dry_run_sizing",
    True,
    "With --dry_run: also size the study (`sweep.sizing`: counts, networks, "
    "FLOPs, memory, hours, reference fill).",
)
_DRY_RUN_COMPILE = flags.DEFINE_bool(
    "dry_run_compile",
    None,
    "With --dry_run: compile each (task, sampler) program on abstract inputs for XLA's memory and FLOP "
    "estimates (once per distinct program). Default: yes, except for networks at the full training "
    "scale on a CPU backend (a published-scale program takes about 7 minutes to compile on a 2-core CPU).",
)
_DRY_RUN_PILOT = flags.DEFINE_integer(
    "dry_run_pilot",
    2048,
    "With --dry_run: prior draws of the pilot pool that estimates whether each "
    "eps-rule reference fills (0: no pilot).",
    lower_bound=0,
)
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (multi-host).")
_MEMORY = flags.DEFINE_integer(
    "memory_limit_bytes",
    None,
    "Device memory the compiled programs must fit in (default: $POSTERIORJAX_MEMORY_LIMIT_BYTES, the "
    "accelerator's memory, or the machine's RAM); checked before anything expensive is built.",
    lower_bound=1,
)


def main(argv):
    del argv
    import jax

    from posteriorjax import plugins, sweep
    from posteriorjax.report import stage
    from posteriorjax.sweep.settings import settings

    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    plugins.load(_PLUGINS.value)  # on every process, before anything is built
    if _DRY_RUN.value:
        compile_ = _DRY_RUN_COMPILE.value
        if compile_ is None:
            scale = settings(_CONFIG.value).training_scale
            compile_ = not (jax.default_backend() == "cpu" and scale == "full")
            if not compile_ and _DRY_RUN_SIZING.value:
                print(
                    "[size] full-scale networks on a CPU: programs traced, not compiled (no XLA memory); "
                    "--dry_run_compile=true compiles them",
                    file=sys.stderr,
                    flush=True,
                )
        out = sweep.dry_run(
            _CONFIG.value,
            sizing=_DRY_RUN_SIZING.value,
            compile=compile_,
            pilot_draws=_DRY_RUN_PILOT.value,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
        print(json.dumps(out, indent=1, default=str))
        return
    if _WORKDIR.value is None:
        raise app.UsageError("--workdir is required (except with --dry_run)")
    if _DISTRIBUTED.value:
        jax.distributed.initialize()
    sweep.run(
        _CONFIG.value,
        _WORKDIR.value,
        plugins=_PLUGINS.value,
        memory_limit_bytes=_MEMORY.value,
        stage=_STAGE.value,
    )
    if _STAGE.value == "all" and jax.process_index() == 0:
        stage.write(_WORKDIR.value)  # the tables (printed) and figures of what the sweep stored


def entry(argv=None):
    """`posteriorjax sweep` (`cli.execute`: help, one-line user errors, CPU threads, XLA cache)."""
    cli.execute(
        main, argv, doc=__doc__, required=["config"], reserve_cpu_threads=True, compilation_cache=True
    )


if __name__ == "__main__":
    entry()
