"""Re-render a sweep's tables and figures: `python -m experiments.report --workdir=DIR`.

Reads DIR/results.jsonl (and, when present, config.json, samples/ and references/),
rewrites DIR/results.csv and DIR/summary.md, draws every figure that applies into
DIR/figures/, and prints the table and the figure paths. Nothing is recomputed.
"""

from absl import app, flags

from posteriorjax import figures

_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep workdir holding results.jsonl.")


def main(argv):
    del argv
    table, paths = figures.report(_WORKDIR.value)
    print(table)
    print(f"{len(paths)} figure(s):")
    for path in paths:
        print(f"  {path}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["workdir"])
    app.run(main)
