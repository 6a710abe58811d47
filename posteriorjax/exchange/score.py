"""Score samples from a file as the sweep scores its samplers' samples: records in `results.jsonl`.

`evaluate(workdir, task, samples)` rebuilds the study of `workdir` (its `config.json`, written by
the sweep or by `export`), reads the samples (`readers.read_ensemble`: validated before anything
is written; weighted ensembles with their normalized weights), scores every case with the
sweep's own `program.score_program` (the full metric suite, observation misfit, TARP/MIRA
statistics and the study's diagnostics, with the same cases, keys and TARP reference points)
against the **held-out** reference the sweep's rows are scored on (`reference.heldout`), and
appends one `store.Record` per case to `results.jsonl` through `store.ResultsFile`, so
`experiments.report` tables and draws them as any sampler of the sweep. Records of a file
carry no hyperparameters and sampler seed 0.

Each record also holds the PosteriorBench metrics against the exported **public** reference
(`public_<metric>`), the Kish effective sample size of the ensemble (`ess`), and in `scored`
what it was scored on: the reference set (set, method, checksum), the cases file (path,
SHA-256, case ids) and the samples file (path, SHA-256, reader, dtype). The held-out /
public ratio of the case means (`heldout.gaps`) above its threshold is a warning (the
threshold: 1.08, or the Monte Carlo spread measured between the two halves of the held-out
set when larger, `heldout.threshold`; the per-case half log ratios are recorded as
`split_<metric>`): the samples fit the public set better than an independent equal-size
reference allows.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks, console, deferred, files
from posteriorjax.exchange import readers
from posteriorjax.reference import heldout
from posteriorjax.reference import store as artifact_store
from posteriorjax.report import stage as report_stage
from posteriorjax.sweep import migrate, program, statistics
from posteriorjax.sweep import store as record_store
from posteriorjax.sweep.plan import Plan
from posteriorjax.sweep.settings import settings

SEED = 0  # the sampler seed recorded for samples from a file


def _cases_label(path) -> str:
    """The `Record.cases` label of a cases file or folder: "<name> sha256:<16 hex digits>", the
    `files.file_digest` over its bytes (a folder: its files' relative paths and bytes, in sorted order)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"cases_file: expected an existing file or folder, got {str(path)!r}")
    return f"{path.name} sha256:{files.file_digest(path)[:16]}"


@eqx.filter_jit
def _score_all(task, options: tuple, data, case, samples, weights=None):
    """`(failure, metrics)`: `program.score_program`'s metrics of `samples (K, N, C, H, W)` (with
    member `weights (K, N)` or None) for cases `case (K,)` (compiled once per task, options and
    shapes: notebooks and tests score many files). Its run-time checks are an output
    (`deferred.functionalize`; the caller raises them), so the program holds no host callback
    and the persistent cache can store it."""
    seed, diagnostics, calibration, batch_size = options
    score = program.score_program(task, seed=seed, diagnostics=diagnostics, calibration_options=calibration)

    def run(data, case, samples, weights):
        if weights is None:
            return jax.lax.map(lambda a: score(data, a[0], a[1]), (case, samples), batch_size=batch_size)
        return jax.lax.map(lambda a: score(data, *a), (case, samples, weights), batch_size=batch_size)

    return deferred.functionalize(run)(data, case, samples, weights)


def _scores(t, s, cases, reference, *, grid, x, weights, where: str) -> dict:
    """Host metrics `{name: (K,)}` of the samples against one reference set."""
    data = statistics.program_data(t, cases, reference, seed=s.seed)
    options = (s.seed, tuple(s.diagnostics), s.calibration, s.batch_size)
    w = None if weights is None else jnp.asarray(weights, jnp.float32)
    failure, metrics = _score_all(t, options, data, jnp.asarray(grid.case), jnp.asarray(x), w)
    deferred.raise_failure(failure, where)
    return jax.device_get(metrics)


def evaluate(
    workdir,
    task: str,
    samples,
    *,
    name: str = "file",
    cases_file=None,
    wall_time_s: float = 0.0,
    figures: bool = False,
    replace: bool = False,
    progress: bool = False,
) -> list[record_store.Record]:
    """Score the samples at `samples` (a path, `readers`) for `task` of the study in `workdir`.

    The file holds the N samples of each case, `(N, C, H, W)` per case or stacked
    `(K, N, C, H, W)`, in the physical units of the task's channels (`readers.read_ensemble`).

    `name`: the sampler label of the records (refused when `results.jsonl` already holds
    records of (task, name), unless `replace`: then they are replaced in one atomic rewrite,
    the old file copied aside first, `results.jsonl.replaced`, `-<n>` when taken);
    `cases_file`: score on the cases of this file (export format or PosteriorBench rows) in
    place of the study's, against its own reference (the set is "given", no public score),
    except for this workdir's own export (`_own_export`), scored on the held-out set;
    `wall_time_s`: the sampler's time per case, as the caller measured it (recorded as is;
    0 = unknown). Writes the tables (`results.csv`, `summary.md`) and, with `figures`, the
    figures. Warns when the held-out / public gap exceeds `heldout.GAP_THRESHOLD`. With
    `progress`, a line as each stage starts and ends (`console.Steps`). Returns the new records.
    """
    steps = console.Steps("evaluate", 5 + bool(figures), enabled=progress)
    steps("reading the study")
    name = checks.path_component("name", name)  # a file name under workdir/samples/<task>/
    workdir = Path(workdir)
    config = record_store.workdir_config(workdir)
    migrate.check(workdir)
    if task not in config.tasks:
        raise ValueError(f"task: the study in {workdir} has tasks {sorted(config.tasks)}, got {task!r}")
    cases_source, scored = "study", {}
    if cases_file is not None:
        cases_source = _cases_label(cases_file)
        with config.unlocked():
            config.cases_files = {**dict(config.get("cases_files", {})), task: str(cases_file)}
    s = settings(config)
    plan = Plan.build(s)
    results = record_store.ResultsFile(workdir / "results.jsonl", record_store.workdir_config_hash(workdir))
    if results.done((task, name)) and not replace:
        raise ValueError(
            f"name: {workdir}/results.jsonl already holds records of sampler {name!r} on task {task!r}; "
            "pass another --name, or --replace to replace them (the old file is kept aside)"
        )
    t, ids, cases = plan.tasks[task], plan.case_ids(task), plan.cases(task)
    if cases_file is not None:
        scored["cases_file"] = {
            "path": str(Path(cases_file).resolve()),
            "sha256": files.file_digest(cases_file),
            "case_ids": list(ids),
        }
    steps(f"reading the samples of {len(ids)} case(s) from {samples}")
    ensemble = readers.read_ensemble(samples, ids, t.unknown_shape, task=task)
    scored["samples"] = {
        "path": str(Path(samples).resolve()),
        "sha256": files.file_digest(samples),
        "reader": ensemble.reader,
        "dtype": ensemble.dtype,
        "weighted": ensemble.weights is not None,
    }
    x, weights = ensemble.samples, ensemble.weights
    steps(f"the reference posterior of {task} (read from the workdir, or built)")
    scorer = plan if cases_file is None else _own_export(workdir, task, plan)
    ref_samples, ref_weights, report = scorer.reference(task, workdir, lead=True, progress=False)
    scored["reference"] = heldout.tag(report["set"], ref_samples, ref_weights, report)
    steps(
        f"scoring {len(ids)} case(s) x {x.shape[1]} samples (compiling the scoring program, then running it)"
    )
    grid = program.expand(len(ids), {}, (SEED,), {})
    metrics = _scores(
        t, s, cases, (ref_samples, ref_weights), grid=grid, x=x, weights=weights, where=f"{task}/{name}"
    )
    metrics["ess"] = ensemble.ess()[grid.case]
    if report["set"] == heldout.HELDOUT:
        public = scorer.reference(task, workdir, lead=True, progress=False, which=heldout.PUBLIC)
        pub = _scores(
            t, s, cases, public[:2], grid=grid, x=x, weights=weights, where=f"{task}/{name} (public set)"
        )
        metrics.update({f"public_{m}": pub[m] for m in heldout.PUBLIC_METRICS if m in pub})
        if ref_samples.shape[1] >= 4:  # the held-out set's own two-half spread (`heldout.threshold`)
            halves = heldout.halves(ref_samples, ref_weights)
            a, b = (
                _scores(t, s, cases, h, grid=grid, x=x, weights=weights, where=f"{task}/{name} (half)")
                for h in halves
            )
            metrics.update({f"split_{m}": v for m, v in heldout.split_ratios(a, b).items()})
    steps("writing the records, the stored samples and the tables")
    config_ids = grid.ids()
    records = [
        record_store.Record(
            task=task,
            sampler=name,
            config_id=config_ids[i],
            index=i,
            case=int(grid.case[i]),
            seed=SEED,
            hparams={},
            num_samples=int(x.shape[1]),
            metrics={k: record_store.jsonable(v[i]) for k, v in metrics.items()},
            wall_time_s=float(wall_time_s),
            compile_time_s=0.0,
            evaluation=t.evaluation_name,
            cases=cases_source,
            scored=scored,
        )
        for i in range(grid.size)
    ]
    if results.done((task, name)):
        _replace_records(workdir, results, (task, name), records)
    else:
        results.append(records)
    _warn_gap(records, f"{task}/{name}")
    if s.save_samples:
        keep = [i for i in range(grid.size) if grid.case[i] < s.save_samples]
        stored = {
            "samples": x[grid.case[keep]],
            "case": grid.case[keep],
            "seed": grid.seed[keep],
            "config_id": np.asarray([config_ids[i] for i in keep]),
        }
        if weights is not None:
            stored["weights"] = weights[grid.case[keep]]
        files.write_arrays_checked(workdir / "samples" / task / f"{name}.npz", stored)
    if figures:
        steps("drawing the figures")
    report_stage.write(workdir, figures=figures, progress=False)
    steps.close()
    return records


def _own_export(workdir: Path, task: str, given: Plan) -> Plan:
    """The plan whose references score samples on a given cases file: the workdir's own study plan
    when the file is this workdir's export (the study's case ids and observations, and the
    public reference beside them), so its held-out set scores them as it scores the study's
    cases and the exported reference never does; else `given` (the file's own reference)."""
    config = record_store.workdir_config(workdir)
    if task in config.get("cases_files", {}):
        return given
    directory = record_store.reference_directory(workdir, task)
    if not (directory / files.MANIFEST).exists():
        return given  # no public set here: the file was not exported from this workdir
    study = Plan.build(settings(config))
    g = given.given[task]
    public = artifact_store.load_references(directory)[1]
    same = (
        g.ids == study.case_ids(task)
        and np.array_equal(np.asarray(g.cases.y_obs), np.asarray(study.cases(task).y_obs, np.float32))
        and heldout.checksum(g.ref_samples, g.ref_weights)
        == heldout.checksum(public["ref_samples"], public["ref_weights"])
    )
    return study if same else given


REPLACED = "results.jsonl.replaced"


def _replace_records(workdir, results: record_store.ResultsFile, pair: tuple[str, str], records) -> Path:
    """Replace the records of `pair` in `results` by `records` in one atomic rewrite; the old file
    is copied aside first (`results.jsonl.replaced`, `-<n>` when taken). Returns the copy's path."""
    aside = heldout.set_aside(results.path, REPLACED)
    kept = [r for r in results.records if (r.task, r.sampler) != pair]
    lines = [record_store.record_line(r, results.config) for r in (*kept, *records)]
    files.atomic_write_lines(results.path, lines)
    results.records = [*kept, *records]
    return aside


def _warn_gap(records, where: str) -> None:
    """Warn when the held-out / public ratio of a metric's case mean exceeds its threshold
    (`heldout.record_threshold`: 1.08, or the held-out set's own two-half spread when larger)."""
    means = {}
    for prefix in ("", "public_"):
        for m in heldout.GAP_METRICS:
            values = [r.metrics.get(prefix + m) for r in records]
            if values and all(v is not None for v in values):
                means[prefix + m] = float(np.mean(values))
    gap = heldout.gaps(means, {m: means.get("public_" + m) for m in heldout.GAP_METRICS})
    limit = heldout.record_threshold(records)
    high = heldout.flagged(gap, limit)
    if high:
        warnings.warn(
            f"{where}: scores on the public reference are better than on the held-out one beyond "
            "the two-reference spread (held-out / public above the threshold): "
            + ", ".join(f"{m} {g:.3g} > {limit[m]:.3g}" for m, g in high.items())
            + "; the samples may have been fit to the exported reference",
            stacklevel=3,
        )
