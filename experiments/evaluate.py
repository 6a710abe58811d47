"""Score samples from a file: `python -m experiments.evaluate --workdir=DIR --task=T --samples=PATH`.

DIR is a sweep or export workdir (its config.json names the study). PATH: `.npz`, `.npy`, `.h5`,
`.pt` (with torch installed) or a PosteriorBench `<dir>/<case_id>/generated.h5` tree
(`posteriorjax.exchange.readers`). Appends one record per case to DIR/results.jsonl under
`--name` (the sweep's records, metrics and calibration statistics), rewrites the tables and,
with `--figures`, the figures; `python -m experiments.report --workdir=DIR` redraws everything.
`--cases_file` scores on given cases (an exported cases file or a PosteriorBench DatasetDict).
Scores are against the held-out reference (never exported), with the public set's beside them
(`public_*`, a warning when they are much better); `--replace` replaces a label's records.
"""

from pathlib import Path

from absl import flags

from posteriorjax import cli, console

_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep or export workdir (holds config.json).")
_TASK = flags.DEFINE_string("task", None, "Task name of the study.")
_SAMPLES = flags.DEFINE_string("samples", None, "Samples file or PosteriorBench predictions directory.")
_NAME = flags.DEFINE_string("name", "file", "Sampler label of the records.")
_CASES = flags.DEFINE_string("cases_file", None, "Score on the cases of this file instead of the study's.")
_WALL = flags.DEFINE_float("wall_time_s", 0.0, "The sampler's time per case, as measured (0 = unknown).")
_REPLACE = flags.DEFINE_bool("replace", False, "Replace the records of --name (old file kept aside).")
_FIGURES = flags.DEFINE_bool("figures", True, "Render the figures after scoring.")
_PLUGINS = console.define_plugins_flag()


def main(argv):
    del argv
    from posteriorjax import plugins  # the registries (and JAX): only once --help is past
    from posteriorjax.exchange import evaluate

    console.setup_logging()
    plugins.load(_PLUGINS.value)
    records = evaluate(
        _WORKDIR.value,
        _TASK.value,
        _SAMPLES.value,
        name=_NAME.value,
        cases_file=_CASES.value,
        wall_time_s=_WALL.value,
        figures=_FIGURES.value,
        replace=_REPLACE.value,
        progress=True,
    )
    results = Path(_WORKDIR.value) / "results.jsonl"
    print(f"{len(records)} record(s) of {_NAME.value!r} on {_TASK.value!r} appended to {results}")
    print((Path(_WORKDIR.value) / "summary.md").read_text())


def entry(argv=None):
    """`posteriorjax evaluate` (`cli.execute`: help, one-line user errors)."""
    cli.execute(main, argv, doc=__doc__, required=["workdir", "task", "samples"])


if __name__ == "__main__":
    entry()
