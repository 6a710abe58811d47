"""Re-render a sweep's tables and figures: `python -m experiments.report --workdir=DIR`.

Reads DIR/results.jsonl (and, when present, config.json, samples/ and references/),
rewrites DIR/results.csv and DIR/summary.md, draws every figure that applies into
DIR/figures/, and prints the table and the figure paths. Nothing is recomputed.
`--noise_workdirs=DIR2,DIR3` adds sweeps of the same study at other noise levels
(one workdir per level) to the optimal-hyperparameter-vs-1/sigma^2 figures.
`--plugins=mod1,mod2` loads the modules registering the workdir's out-of-tree samplers/tasks
(`posteriorjax.plugins`; the sweep's provenance.json names the ones it was run with).
A workdir whose records, references or stored samples fail verification
(`sweep.store.verify_workdir`: torn or edited lines, checksum mismatches) is refused with
the list of what failed; `--leaderboard` prints one table per task ranking every row
(`posteriorjax.exchange.leaderboard`) instead; `--repair` sets those aside and reruns the sweep of its
config.json, which recomputes exactly what failed, then reports.
"""

import json
from pathlib import Path

from absl import app, flags

from posteriorjax import cli, console

_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep workdir holding results.jsonl.")
_PLUGINS = console.define_plugins_flag()
_NOISE_WORKDIRS = flags.DEFINE_list(
    "noise_workdirs", [], "Workdirs of the same study at other noise levels (comma-separated)."
)
_LEADERBOARD = flags.DEFINE_bool(
    "leaderboard", False, "Print one ranked table per task (posteriorjax.exchange.leaderboard) and stop."
)
_REPAIR = flags.DEFINE_bool(
    "repair", False, "Set aside what fails verification and recompute it (reruns the workdir's sweep)."
)


def check_workdir(workdir, repair: bool = False) -> None:
    """Raise ValueError listing what in `workdir` fails verification; with `repair`, rebuild it first.

    Repair reruns the sweep of `workdir/config.json`: the sweep's own readers set aside
    every bad line and file and recompute only those configurations, references and samples.
    """
    from posteriorjax.sweep import store

    problems = store.verify_workdir(workdir)
    if problems and repair:
        import ml_collections

        from posteriorjax import sweep

        config = ml_collections.ConfigDict(json.loads((Path(workdir) / "config.json").read_text()))
        config.overwrite = False
        sweep.run(config, workdir, progress=False)
        problems = store.verify_workdir(workdir)
    if problems:
        raise ValueError(
            f"workdir: {workdir} fails verification ({len(problems)} problem(s)):\n  "
            + "\n  ".join(problems)
            + "\nrerun with --repair to set these aside and recompute them"
        )


def main(argv):
    del argv
    from posteriorjax import plugins  # the registries (and JAX): only once --help is past

    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    plugins.load(_PLUGINS.value)
    for workdir in (_WORKDIR.value, *_NOISE_WORKDIRS.value):
        plugins.check_workdir(workdir)  # names the plugins a workdir needs
    for workdir in (_WORKDIR.value, *_NOISE_WORKDIRS.value):
        try:
            check_workdir(workdir, repair=_REPAIR.value)
        except ValueError as e:
            raise app.UsageError(str(e)) from e
    if _LEADERBOARD.value:
        from posteriorjax.exchange import leaderboard
        from posteriorjax.sweep import store

        print(leaderboard.table(store.read_records(Path(_WORKDIR.value) / "results.jsonl")))
        return
    from posteriorjax.report import stage

    table, paths = stage.write(
        _WORKDIR.value, figures=True, noise_workdirs=_NOISE_WORKDIRS.value, progress=False
    )
    print(table)
    print(f"{len(paths)} figure(s):")
    for path in paths:
        print(f"  {path}")


def entry(argv=None):
    """`posteriorjax report` (`cli.execute`: help, one-line user errors)."""
    cli.execute(main, argv, doc=__doc__, required=["workdir"])


if __name__ == "__main__":
    entry()
