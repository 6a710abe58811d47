"""Calibration stage: a sampler's hyperparameter chosen on validation cases, never on test cases.

PosteriorBench calibrates guidance weights on a validation split disjoint from its test split
(its case ids are numbered over validation, then test). A sweep entry with
`calibrate: {hparam, grid, num_cases, rule, relative}` (`settings.CalibrateSettings`) runs,
before its pair, the pair's own program (`pair.run_pair`: the hyperparameter is a vmapped axis of
the configuration grid) over `grid` on `num_cases` validation cases, scores it with the study's
metrics against the validation cases' reference, and runs the test sweep at the chosen value.

Validation cases are `Task.cases(seed, num, start=VALIDATION_START)`: case i uses
`fold_in(key(seed), VALIDATION_START + i)` while the test cases use indices `0 .. num_cases - 1`
(`num_cases < VALIDATION_START`), so the two sets are drawn from disjoint key indices; their ids
are `<task>_val_<i>` against the test cases' `<task>_<i>`. Their reference is the task's method
on the same pool as the test reference with its own case keys (`plan.Plan.reference`).

Selection (`select`): per grid value, the mean over validation cases (and seeds, and the entry's
other axes) of each metric gives the calibration curve; rule ``"rank_mean"`` ranks the grid
values per posterior metric (`POSTERIOR_METRICS`, the paper's five; a non-finite mean ranks last,
ties share their mean rank) and picks the lowest mean rank; a metric name picks the lowest mean of
that metric. Ties go to the first value of the grid. PosteriorBench Sec. 4.6 / App. D.1 report
the per-metric optima lambda*_m = argmin_lambda m and show they differ between metrics, so no
single metric is privileged by default.

Output: `workdir/calibration/<task>/<label>.json` (grid, rule, curves, score, chosen value, the
validation and test case ids), reused on a rerun with the same identity; the report stage draws
its curves beside it (`<label>.png`, `report.figures.calibration_choice_figure`). The validation
records themselves go to `<label>.<digest>.jsonl` (`records_path`) as each chunk finishes, so an
interrupted calibration resumes where it stopped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax
import numpy as np
from absl import logging as absl_logging

from posteriorjax import console, files
from posteriorjax.metrics import registry as metric_registry
from posteriorjax.sweep import program
from posteriorjax.sweep import store as record_store
from posteriorjax.sweep.pair import run_pair
from posteriorjax.sweep.settings import CalibrateSettings, SamplerEntry
from posteriorjax.tasks.base import Cases, Task

# the first case index of the validation cases; test cases use 0 .. num_cases - 1
VALIDATION_START = 2**30
# the five posterior metrics of PosteriorBench (mean, std, MMD, SWD, spectral), all lower-is-better
POSTERIOR_METRICS = metric_registry.POSTERIOR


def validation_cases(task: Task, seed: int, num: int) -> Cases:
    """`num` validation cases: case i from `fold_in(key(seed), VALIDATION_START + i)`."""
    return task.cases(seed, num, start=VALIDATION_START)


def validation_indices(num: int) -> list[int]:
    """The key indices of the validation cases (`validation_cases`)."""
    return [VALIDATION_START + i for i in range(num)]


def validation_ids(task_name: str, num: int) -> tuple[str, ...]:
    """`<task>_val_<i>`, the ids of the validation cases (test cases: `<task>_<i>`)."""
    return tuple(f"{task_name}_val_{i}" for i in range(num))


def records_path(directory: Path, label: str, identity: Mapping) -> Path:
    """Where a calibration's validation records accumulate: `<label>.<digest>.jsonl` beside its
    `<label>.json`, the digest that of the calibration's identity (entry, seeds, sample count,
    task, validation reference)."""
    return Path(directory) / f"{label}.{files.json_digest(identity, 16)}.jsonl"


def check_disjoint(num_cases: int) -> None:
    """ValueError unless the test indices `0 .. num_cases - 1` stay below `VALIDATION_START`."""
    if num_cases > VALIDATION_START:
        raise ValueError(
            f"config.num_cases: expected at most {VALIDATION_START} test cases (the validation cases "
            f"start at key index {VALIDATION_START}), got {num_cases}"
        )


def values(cal: CalibrateSettings, default: float) -> tuple[float, ...]:
    """The grid's hyperparameter values: `cal.grid`, or with `relative` its multiples of `default`."""
    return tuple(float(v) * float(default) if cal.relative else float(v) for v in cal.grid)


def curves(records: Sequence, hparam: str, grid: Sequence[float], metrics: Sequence[str]) -> dict:
    """{metric: [mean over the records at each grid value]}: NaN when any is missing or non-finite,
    or when a record has a member that diverged (`num_nonfinite` > 0; a published binary projection
    turns such a member into a finite field, `AbstractSampler.finish`), so no weight at which the
    sampler diverges is chosen."""
    out = {}
    for m in metrics:
        row = []
        for v in grid:
            at = [r for r in records if np.float32(r.hparams[hparam]) == np.float32(v)]
            vals = [np.nan if r.metrics.get("num_nonfinite") else r.metrics.get(m) for r in at]
            vals = [np.nan if x is None else float(x) for x in vals]
            row.append(float(np.mean(vals)) if vals and all(map(math.isfinite, vals)) else float("nan"))
        out[m] = row
    return out


def _ranks(row: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of `row` (lowest first), ties sharing their mean rank, non-finite values last."""
    a = np.asarray(row, np.float64)
    a = np.where(np.isfinite(a), a, np.inf)
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(1, len(a) + 1)
    for value in np.unique(a):
        tied = a == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def select(curve: Mapping[str, Sequence[float]], rule: str) -> tuple[list[float], int]:
    """(score per grid value, index of the chosen value = the first argmin of the score).

    rule ``"rank_mean"``: the mean over `POSTERIOR_METRICS` of the value's rank; a metric
    name: that metric's curve (non-finite as +inf).
    """
    if rule == "rank_mean":
        score = np.mean([_ranks(curve[m]) for m in POSTERIOR_METRICS], axis=0)
    else:
        score = np.asarray(curve[rule], np.float64)
        score = np.where(np.isfinite(score), score, np.inf)
    if not np.any(np.isfinite(score)):
        raise ValueError(f"calibrate: every grid value scored non-finite under rule {rule!r}")
    return [float(v) for v in score], int(np.argmin(score))


def stage(study, task_name: str, entry: SamplerEntry, sampler) -> program.ConfigGrid:
    """Run `entry`'s calibration on validation cases and return the test grid at the chosen value.

    `study`: the running `run._Study` (plan, workdir, mesh, stores). Writes (process 0)
    `calibration/<task>/<label>.json`, or reuses it when their identity (the
    entry, seeds, sample count, the validation reference) matches; prints the choice.
    """
    plan, s, cal = study.plan, study.plan.settings, entry.calibrate
    where = f"config.samplers.{entry.label}.calibrate"
    if cal.hparam not in sampler.defaults:
        raise ValueError(
            f"{where}.hparam: sampler {entry.sampler!r} has no numeric hyperparameter {cal.hparam!r}; "
            f"it has {sorted(sampler.defaults)} (options such as ECI's mixing are static, not calibrated)"
        )
    check_disjoint(s.num_cases)
    if jax.process_count() > 1:
        raise ValueError(
            f"{where}: expected a study on one process (the validation records are not assembled across "
            f"processes), got {jax.process_count()}; calibrate on one host, then pass the chosen value "
            f"as an axis of one value"
        )
    default = float(sampler.defaults[cal.hparam])
    if cal.relative and default == 0:
        raise ValueError(
            f"{where}.relative: the grid multiplies the sampler's default {cal.hparam} = 0 on task "
            f"{task_name!r}; give absolute values (relative=False)"
        )
    grid_values = values(cal, default)
    task = plan.tasks[task_name]
    samples, weights, report = plan.reference(
        task_name,
        study.workdir,
        lead=study.store is not None,
        progress=study.progress,
        validation=cal.num_cases,
    )
    directory = Path(study.workdir) / "calibration" / task_name
    path = directory / f"{entry.label}.json"
    identity = json.loads(
        json.dumps(
            {
                "entry": {
                    "sampler": entry.sampler,
                    "options": entry.options,
                    "axes": entry.axes,
                    "task_options": entry.task_options,
                    "calibrate": vars(cal),
                },
                "seed": s.seed,
                "seeds": list(s.seeds),
                "num_samples": s.num_samples,
                "task": task.config_dict(),
                "reference": report.get("settings"),
                "default": default,
            },
            sort_keys=True,
            default=str,
        )
    )
    result = None
    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("identity") == identity:
            result = stored
    if result is None:
        axes = {**entry.axes, cal.hparam: grid_values}
        grid = program.expand(cal.num_cases, axes, s.seeds, sampler.defaults)
        # Validation records are appended chunk by chunk to a file named by the identity, so an
        # interrupted calibration resumes at its first unfinished chunk instead of starting over
        # (at medium scale one calibration is hours), and a changed identity never reuses them.
        partial = None
        if study.store is not None:
            directory.mkdir(parents=True, exist_ok=True)
            partial = record_store.ResultsFile(records_path(directory, entry.label, identity), "calibration")
        pair = (task_name, entry.label)
        skip = partial.done(pair) if partial else set()

        def chunk_done(done, todo, compile_s, run_s):  # a line per chunk: one can take an hour
            if study.progress:
                absl_logging.info(
                    "[calibrate] %s / %s: %d/%d validation configurations | compile %s, chunk %s",
                    task_name,
                    entry.label,
                    grid.size - todo + done,
                    grid.size,
                    console.duration(compile_s),
                    console.duration(run_s),
                )

        fresh = run_pair(
            task,
            sampler,
            validation_cases(task, s.seed, cal.num_cases),
            (samples, weights),
            grid,
            num_samples=s.num_samples,
            seed=s.seed,
            chunk_size=s.chunk_size,
            batch_size=s.batch_size,
            results=partial,
            skip=skip,
            labels={"task": task_name, "sampler": entry.label},
            mesh=study.mesh,
            progress=chunk_done,
            calibration_options=s.calibration,
            memory_limit_bytes=study.memory_limit_bytes,
        )
        records = [r for r in partial.records if (r.task, r.sampler) == pair] if partial else fresh
        curve = curves(records, cal.hparam, grid_values, metric_registry.TABLE)
        score, best = select(curve, cal.rule)
        result = {
            "task": task_name,
            "sampler": entry.label,
            "hparam": cal.hparam,
            "rule": cal.rule,
            "grid": list(cal.grid),
            "relative": cal.relative,
            "default": default,
            "values": list(grid_values),
            "curve": curve,
            "score": score,
            "chosen": grid_values[best],
            "validation_ids": list(validation_ids(task_name, cal.num_cases)),
            "validation_key_indices": validation_indices(cal.num_cases),
            "test_ids": list(plan.case_ids(task_name)),
            "test_key_indices": list(range(s.num_cases)),
            "identity": identity,
        }
        if study.store is not None:
            directory.mkdir(parents=True, exist_ok=True)
            files.atomic_write_json(path, result)
    line = (
        f"[calibrate] {task_name} / {entry.label}: {cal.hparam} = {result['chosen']:g} "
        f"(rule {cal.rule}, {cal.num_cases} validation cases, grid {result['values']}, "
        f"score {[round(v, 4) for v in result['score']]})"
    )
    absl_logging.info("%s", line)
    if study.progress:
        print(line, flush=True)
    return program.expand(
        s.num_cases, {**entry.axes, cal.hparam: (result["chosen"],)}, s.seeds, sampler.defaults
    )
