"""Every study of the paper reproduction, in order, into one root workdir; or what is left to run.

    python -m experiments.reproduce --scale=tiny --root=ROOT [--studies=a,b] [--status]
    scripts/reproduce.sh [tiny|full] [ROOT] [STUDY ...] [--status]      # the same

Each study is a list of steps (`steps`): sweeps (`experiments.sweep`, one per noise level for the
noise studies), reference builds (`experiments.reference`), the synthetic calibration study and the
study reports (`experiments.studies`: Fig. 4's V-shape from the main table's records, Fig. 7's
optima with their standard errors, Tables 3 and 4). A run skips every step already done (`state`)
and runs the rest in order; a sweep left part-way resumes from its workdir (finished references,
networks and records are kept); the sweeps of a noise study share one `networks` folder
(`share_networks`), so a network trained on noise-free data trains once. `--status` runs
nothing: it prints each step's workdir and state ("done", "partial: n/N records", "not
started", "waiting for <step>") and how many are left.
Extra sweep flags (e.g. ``--config.num_cases=10``) come from the SWEEP_FLAGS environment variable.

Scales: ``tiny`` (the CPU scale of every config, `:tiny`), ``medium`` (`MEDIUM`: the main table at
`configs/main_table.py:medium`, one sweep per task into ROOT/main_table/<task>, the V-shape
report reading those parts together, and Table 3 at `configs/ood_prior_range.py:medium`; hours
on a CPU) and ``full`` (the published scale).
Labelled variants (`VARIANTS`) run only when named, at their one scale whatever `--scale` says:
``guidance_calibration_medium_oracle`` is `configs/guidance_calibration.py:medium_oracle` (FunDPS
with the exact prior score on ``poisson_fixed`` at 32 x 32) over its thresholds, then the
``guidance_calibration`` report; ``noise_levels_medium_oracle`` is `configs/noise_levels.py:
medium_oracle` (the oracle guided samplers and ES-MDA) over its noise levels, then the
``noise_levels`` report.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from absl import flags

from posteriorjax import cli

STUDIES = (
    "quickstart",
    "reference_validation",
    "main_table",
    "guidance_calibration",
    "noise_levels",
    "resolution",
    "ood_prior_range",
    "pointwise_vs_distributional",
    "calibration_protocol",
    "model_comparison",
)
# labelled variants of a study, run only when named, one sweep per noise level: {name: (study, config
# argument, the config module's function listing the levels, the config field set per sweep, the
# workdir prefix)}
VARIANTS = {
    "guidance_calibration_medium_oracle": (
        "guidance_calibration",
        "medium_oracle",
        "thresholds_medium_oracle",
        "noise_threshold",
        "eps",
    ),
    "noise_levels_medium_oracle": (
        "noise_levels",
        "medium_oracle",
        "noise_levels_medium_oracle",
        "noise_std",
        "noise",
    ),
}
SCALES = ("tiny", "medium", "full")
# the studies with a medium form (a CPU study of hours): the main table (`configs/main_table.py:medium`)
# as one sweep per task (`main_table.MEDIUM_DEFAULT`), the V-shape reading the parts together, and
# Table 3 (`configs/ood_prior_range.py:medium`)
MEDIUM = ("main_table", "pointwise_vs_distributional", "ood_prior_range")
# the studies reported by `experiments.studies` after their sweeps
REPORTED = ("guidance_calibration", "noise_levels", "resolution", "ood_prior_range")

_SCALE = flags.DEFINE_enum(
    "scale",
    "tiny",
    SCALES,
    "tiny: every config at :tiny (CPU); medium: the main table at :medium, one sweep per task, and "
    "its V-shape (CPU hours); full: the published scale.",
)
_ROOT = flags.DEFINE_string(
    "root", None, "Root workdir (default ./reproduce-<scale>); each study writes ROOT/<study>."
)
_STUDIES = flags.DEFINE_list(
    "studies", [], f"Studies to run, in this order (default all): {', '.join(STUDIES)}."
)
_STATUS = flags.DEFINE_bool("status", False, "Print each step's workdir and state; run nothing.")


@dataclasses.dataclass(frozen=True)
class Step:
    """One command of a study: `kind` ("sweep", "reference", "synthetic", "report"), the folder it
    fills, the `python -m` arguments, the steps whose output it reads (`needs`) and, for the sweeps
    of one study at several noise levels, the `networks` folder they share (`share_networks`)."""

    study: str
    kind: str
    workdir: Path
    args: tuple[str, ...]
    needs: tuple[Path, ...] = ()
    networks: Path | None = None

    def command(self) -> list[str]:
        extra = shlex.split(os.environ.get("SWEEP_FLAGS", "")) if self.kind == "sweep" else []
        return [sys.executable, "-m", *self.args, *extra]


def _grid(module: str, function: str, tiny: bool) -> tuple:
    return tuple(getattr(importlib.import_module(f"configs.{module}"), function)(tiny))


def default_studies(scale: str) -> tuple[str, ...]:
    """The studies a run at `scale` covers when none is named: `MEDIUM` at medium, else all."""
    return MEDIUM if scale == "medium" else STUDIES


def steps(scale: str, root, studies=None) -> list[Step]:
    """The steps of `studies` (default `default_studies(scale)`) at `scale` under `root`, in order,
    each workdir once."""
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {SCALES}, got {scale!r}")
    studies = default_studies(scale) if studies is None else studies
    unknown = [s for s in studies if s not in STUDIES and s not in VARIANTS]
    if unknown:
        raise ValueError(f"studies: unknown {unknown}; expected some of {[*STUDIES, *VARIANTS]}")
    if scale == "medium":
        absent = [s for s in studies if s not in MEDIUM and s not in VARIANTS]
        if absent:
            raise ValueError(f"studies: {absent} have no medium form; at medium: {[*MEDIUM, *VARIANTS]}")
    root, tiny = Path(root), scale == "tiny"
    arg = ":tiny" if tiny else ""

    def sweep(study, config, workdir, *flags_, networks=None):
        args = ("experiments.sweep", f"--config=configs/{config}.py{arg}", f"--workdir={workdir}", *flags_)
        return Step(study, "sweep", workdir, args, networks=networks)

    def report(study, workdir, out, needs, label=None):
        args = ("experiments.studies", f"--study={study}", f"--workdir={workdir}", f"--out={out}")
        return Step(label or study, "report", out / f"{study}.md", args, tuple(needs))

    out: list[Step] = []
    for study in studies:
        here = root / study
        nets = here / "networks"  # the noise studies' sweeps: one folder of networks (`share_networks`)
        if study == "quickstart":  # one (CPU) scale
            args = ("experiments.sweep", "--config=configs/quickstart.py", f"--workdir={here}")
            out.append(Step(study, "sweep", here, args))
        elif study == "reference_validation":
            for task in ("darcy", "poisson"):
                w = here / task
                args = (
                    "experiments.reference",
                    f"--config=configs/reference_validation.py{arg}",
                    f"--config.task={task}",
                    f"--workdir={w}",
                )
                out.append(Step(study, "reference", w, args))
        elif study in VARIANTS:  # one scale: the variant's own
            base_study, variant, grid, field, prefix = VARIANTS[study]
            module = importlib.import_module(f"configs.{base_study}")
            sweeps = []
            for level in getattr(module, grid)():
                w = here / f"{prefix}={level!r}"
                args = (
                    "experiments.sweep",
                    f"--config=configs/{base_study}.py:{variant}",
                    f"--workdir={w}",
                    f"--config.{field}={level!r}",
                )
                sweeps.append(Step(study, "sweep", w, args))  # no network to share
            out += [*sweeps, report(base_study, here, here, [s.workdir for s in sweeps], label=study)]
        elif study == "guidance_calibration":
            sweeps = [
                sweep(study, study, here / f"eps={eps!r}", f"--config.noise_threshold={eps!r}", networks=nets)
                for eps in _grid(study, "thresholds", tiny)
            ]
            out += [*sweeps, report(study, here, here, [s.workdir for s in sweeps])]
        elif study == "noise_levels":
            sweeps = [
                sweep(study, study, here / f"noise={s!r}", f"--config.noise_std={s!r}", networks=nets)
                for s in _grid(study, "noise_levels", tiny)
            ]
            out += [*sweeps, report(study, here, here, [s.workdir for s in sweeps])]
        elif scale == "medium" and study in ("main_table", "pointwise_vs_distributional"):
            tasks = importlib.import_module("configs.main_table").MEDIUM_DEFAULT
            parts = [medium_part(root / "main_table", task) for task in tasks]
            out += parts
            if study == "pointwise_vs_distributional":  # the parts' records read together
                dirs = [p.workdir for p in parts]
                out.append(report(study, ",".join(map(str, dirs)), here, dirs))
        elif scale == "medium" and study == "ood_prior_range":
            args = ("experiments.sweep", "--config=configs/ood_prior_range.py:medium", f"--workdir={here}")
            out += [Step(study, "sweep", here, args), report(study, here, here, [here])]
        elif study == "pointwise_vs_distributional":  # a report of the main table's records
            main = sweep("main_table", "main_table", root / "main_table")
            out += [main, report(study, main.workdir, here, [main.workdir])]
        elif study == "calibration_protocol":
            args = (
                "experiments.calibration_study",
                f"--config=configs/calibration_protocol.py{arg}",
                f"--workdir={here / 'synthetic'}",
            )
            out += [sweep(study, study, here), Step(study, "synthetic", here / "synthetic", args)]
        else:
            out.append(sweep(study, study, here))
            if study in REPORTED:
                out.append(report(study, here, here, [here]))
    seen, unique = set(), []
    for step in out:
        if step.workdir not in seen:
            seen.add(step.workdir)
            unique.append(step)
    return unique


def medium_part(root: Path, task: str) -> Step:
    """The medium main table's sweep of one task (`configs/main_table.py:medium:<task>`, every
    sampler) into `root/<task>`."""
    args = ("experiments.sweep", f"--config=configs/main_table.py:medium:{task}", f"--workdir={root / task}")
    return Step("main_table", "sweep", root / task, args)


def expected_records(config: dict) -> int:
    """The records a sweep of `config` (its `config.json`) writes: per (task, sampler) pair, cases
    x sampler seeds x the product of the entry's axis sizes (a calibrated hyperparameter: its one
    chosen value)."""
    import ml_collections

    from posteriorjax.sweep.settings import settings

    config = ml_collections.ConfigDict({**config, "overwrite": False})  # config.json leaves it out
    s = settings(config)
    total = 0
    for _, entry in s.pairs():
        size = 1
        for name, values in entry.axes.items():
            if entry.calibrate is None or name != entry.calibrate.hparam:
                size *= len(values)
        total += s.num_cases * len(s.seeds) * size
    return total


def state(step: Step, steps_by_dir: dict | None = None) -> tuple[str, str]:
    """`(state, detail)` of a step, read from its workdir without running anything.

    A sweep is ``done`` when its `results.jsonl` holds every record its `config.json` asks for
    (`expected_records`) and `summary.md` is written; ``partial`` when it has begun; a reference
    build is done with its `report.json`, the synthetic study with `synthetic.json`, a report with
    its Markdown file; a report whose inputs are not done is ``waiting``. Else ``not started``.
    """
    w = step.workdir
    if step.kind == "sweep":
        if not (w / "config.json").is_file():
            return "not started", ""
        from posteriorjax.sweep import store

        have = len(store.read_records(w / "results.jsonl")) if (w / "results.jsonl").is_file() else 0
        want = expected_records(json.loads((w / "config.json").read_text()))
        if have >= want and (w / "summary.md").is_file():
            return "done", f"{have}/{want} records"
        return "partial", f"{have}/{want} records"
    marker = {"reference": w / "report.json", "synthetic": w / "synthetic.json", "report": w}[step.kind]
    if marker.is_file():
        return "done", ""
    if step.kind == "report":
        steps_by_dir = steps_by_dir or {}
        pending = [d for d in step.needs if d in steps_by_dir and state(steps_by_dir[d])[0] != "done"]
        if pending:
            return "waiting", f"for {len(pending)} step(s)"
        return "not started", ""
    return ("partial", "") if w.exists() else ("not started", "")


def status(plan: list[Step]) -> str:
    """One line per step (study, kind, state, detail, workdir) and a last line counting what is left."""
    by_dir = {s.workdir: s for s in plan}
    lines, left = [], 0
    for step in plan:
        st, detail = state(step, by_dir)
        left += st != "done"
        lines.append(f"{step.study:28s} {step.kind:9s} {st:11s} {detail:20s} {step.workdir}")
    lines.append(f"{left} of {len(plan)} step(s) still to run")
    return "\n".join(lines)


def share_networks(step: Step) -> None:
    """Make a sweep's `workdir/networks` a link to its study's shared `step.networks` folder.

    A network's directory is named by the hash of what it is trained on, which leaves out the
    observation noise for a kind trained on noise-free data (`kinds.training_task_options`): the
    sweeps of a noise study then find a prior or surrogate that an earlier noise level trained,
    and train only the noise-dependent networks (MC dropout's inverse network) anew. A workdir that
    already holds its own `networks` folder (an earlier run) keeps it.
    """
    if step.networks is None:
        return
    link = step.workdir / "networks"
    step.workdir.mkdir(parents=True, exist_ok=True)
    step.networks.mkdir(parents=True, exist_ok=True)
    if not link.exists() and not link.is_symlink():
        link.symlink_to(os.path.relpath(step.networks, step.workdir), target_is_directory=True)


def run(plan: list[Step], root: Path) -> None:
    """Run every step not done, in order, appending each one's wall time to `root/timings.txt`."""
    root.mkdir(parents=True, exist_ok=True)
    by_dir = {s.workdir: s for s in plan}
    for step in plan:
        if state(step, by_dir)[0] == "done":
            print(f"=== skip (done) {step.study} {step.kind} -> {step.workdir}", flush=True)
            continue
        print(f"=== {time.strftime('%H:%M:%S', time.gmtime())} {' '.join(step.args)}", flush=True)
        start = time.perf_counter()
        share_networks(step)
        done = subprocess.run(step.command(), cwd=Path(__file__).resolve().parents[1])
        if done.returncode != 0:
            raise SystemExit(
                f"step failed (exit status {done.returncode}): {' '.join(step.args)}; rerun the same "
                "command to resume (finished steps are skipped, a sweep continues from its workdir)"
            )
        line = f"{step.study} {step.kind} {step.workdir}: {time.perf_counter() - start:.0f} s"
        with open(root / "timings.txt", "a") as f:
            f.write(line + "\n")
        print(f"=== {line}", flush=True)
    print(f"done: {root} (summaries in {root}/*/summary.md and <study>.md, timings in {root}/timings.txt)")


def main(argv):
    del argv
    root = Path(_ROOT.value or f"./reproduce-{_SCALE.value}")
    plan = steps(_SCALE.value, root, tuple(_STUDIES.value) or None)
    if _STATUS.value:
        print(status(plan))
        return
    run(plan, root)


def entry(argv=None):
    """`python -m experiments.reproduce` (`cli.execute`: help, one-line user errors)."""
    cli.execute(main, argv, doc=__doc__)


if __name__ == "__main__":
    entry()
