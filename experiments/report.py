"""Re-render a sweep's tables and figures: `python -m experiments.report --workdir=DIR`.

Reads DIR/results.jsonl (and, when present, config.json, samples/ and references/),
rewrites DIR/results.csv and DIR/summary.md, draws every figure that applies into
DIR/figures/, and prints the table and the figure paths. Nothing is recomputed.
`--noise_workdirs=DIR2,DIR3` adds sweeps of the same study at other noise levels
(one workdir per level) to the optimal-hyperparameter-vs-1/sigma^2 figures.
`--plugins=mod1,mod2` loads the modules registering the workdir's out-of-tree samplers/tasks
(`posteriorjax.plugins`; the sweep's provenance.json names the ones it was run with).
"""

from absl import app, flags

from posteriorjax import console, plugins
from posteriorjax.report import figures

_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep workdir holding results.jsonl.")
_PLUGINS = plugins.define_flag()
_NOISE_WORKDIRS = flags.DEFINE_list(
    "noise_workdirs", [], "Workdirs of the same study at other noise levels (comma-separated)."
)


def main(argv):
    del argv
    console.setup_logging()  # --verbosity; other libraries' INFO messages only at --verbosity=1
    plugins.load(_PLUGINS.value)
    for workdir in (_WORKDIR.value, *_NOISE_WORKDIRS.value):
        plugins.check_workdir(workdir)  # names the plugins a workdir needs
    table, paths = figures.report(_WORKDIR.value, noise_workdirs=_NOISE_WORKDIRS.value)
    print(table)
    print(f"{len(paths)} figure(s):")
    for path in paths:
        print(f"  {path}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["workdir"])
    app.run(main)
