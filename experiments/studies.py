"""Tables and figures of PosteriorBench's studies beyond the main table, from their workdirs.

    python -m experiments.studies --study=pointwise_vs_distributional --workdir=MAIN_TABLE_DIR
    python -m experiments.studies --study=guidance_calibration --workdir=ROOT/guidance_calibration
    python -m experiments.studies --study=noise_levels --workdir=ROOT/noise_levels
    python -m experiments.studies --study=ood_prior_range --workdir=ROOT/ood_prior_range
    python -m experiments.studies --study=resolution --workdir=ROOT/resolution

The V-shape (Sec. 4.3, Fig. 4) reads a main-table workdir, or several comma-separated for a table
run in parts (`--workdir=A,B`: a row held by two parts is read from the first): one point per
(task, sampler) row,
pointwise relative L2 against one reference sample (`--pointwise`, default
``rel_l2_one_reference``) against each posterior metric. The noise studies read one sweep per
noise level (the subfolders of `--workdir`, as `scripts/reproduce.sh` writes them) and report
each metric's optimal guidance per level with its across-case standard error (Fig. 7). Tables 3
and 4: mean ± standard error per row. Writes `<out>/<study>.md` and the figures (`--out`,
default the workdir); nothing is recomputed (`posteriorjax.report.studies.report`).
"""

from absl import flags

from posteriorjax import cli, console

# `posteriorjax.report.studies.STUDIES` (written out: `--help` imports no JAX; a test pins the two)
STUDIES = (
    "guidance_calibration",
    "noise_levels",
    "ood_prior_range",
    "pointwise_vs_distributional",
    "resolution",
)
POINTWISE = "rel_l2_one_reference"  # `studies.POINTWISE`
_STUDY = flags.DEFINE_enum("study", None, STUDIES, "The study to report.")
_WORKDIR = flags.DEFINE_string(
    "workdir",
    None,
    "The study's workdir (noise studies: the folder of its sweeps; pointwise_vs_distributional: "
    "one main-table workdir, or several comma-separated for a table run in parts).",
)
_OUT = flags.DEFINE_string("out", None, "Where to write <study>.md and the figures (default: the workdir).")
_POINTWISE = flags.DEFINE_string(
    "pointwise", POINTWISE, "V-shape x axis: a recorded metric (rel_l2_samples: against the truth)."
)


def main(argv):
    del argv
    from posteriorjax.report import studies

    console.setup_logging()
    workdirs = _WORKDIR.value.split(",")
    workdir = workdirs if len(workdirs) > 1 else workdirs[0]
    text, paths = studies.report(_STUDY.value, workdir, _OUT.value, pointwise=_POINTWISE.value)
    print(text)
    print(f"{len(paths)} figure(s):")
    for path in paths:
        print(f"  {path}")


def entry(argv=None):
    """`python -m experiments.studies` (`cli.execute`: help, one-line user errors)."""
    cli.execute(main, argv, doc=__doc__, required=["study", "workdir"])


if __name__ == "__main__":
    entry()
