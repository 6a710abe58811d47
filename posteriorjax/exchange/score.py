"""Score samples from a file as the sweep scores its samplers' samples: records in `results.jsonl`.

`evaluate(workdir, task, samples)` rebuilds the study of `workdir` (its `config.json`, written by
the sweep or by `export`), reads the samples (`readers.read_samples`: validated before anything
is written), scores every case with the sweep's own `program.score_program` (the full metric
suite, observation misfit, TARP/MIRA statistics and the study's diagnostics, with the same
cases, reference, keys and TARP reference points) and appends one `store.Record` per case to
`results.jsonl` through `store.ResultsFile`, so `experiments.report` tables and draws them as
any sampler of the sweep. Records of a file carry no hyperparameters and sampler seed 0.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from posteriorjax import checks, console, deferred
from posteriorjax.exchange import readers
from posteriorjax.sweep import program, statistics
from posteriorjax.sweep import samples as samples_store
from posteriorjax.sweep import store as record_store
from posteriorjax.sweep.plan import Plan
from posteriorjax.sweep.settings import settings

SEED = 0  # the sampler seed recorded for samples from a file


def study_config(workdir) -> ml_collections.ConfigDict:
    """The config a workdir was prepared with (`config.json`)."""
    path = Path(workdir) / "config.json"
    if not path.is_file():
        raise ValueError(
            f"workdir: {workdir} has no config.json; run experiments.export (or the sweep) on it first"
        )
    values = json.loads(path.read_text())
    values.setdefault("overwrite", False)  # not stored: prepare_workdir drops it
    return ml_collections.ConfigDict(values)


def cases_label(path) -> str:
    """The `Record.cases` label of a cases file or folder: "<name> sha256:<16 hex digits>", the
    digest over its bytes (a folder: its files' relative paths and bytes, in sorted order)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"cases_file: expected an existing file or folder, got {str(path)!r}")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(path)).encode() if f != path else b"")
        digest.update(f.read_bytes())
    return f"{path.name} sha256:{digest.hexdigest()[:16]}"


@eqx.filter_jit
def _score_all(task, options: tuple, data, case, samples):
    """`(failure, metrics)`: `program.score_program`'s metrics of `samples (K, N, C, H, W)` for
    cases `case (K,)` (compiled once per task, options and shapes: notebooks and tests score many
    files). Its run-time checks are an output (`deferred.functionalize`; the caller raises
    them), so the program holds no host callback and the persistent cache can store it."""
    seed, diagnostics, calibration, batch_size = options
    score = program.score_program(task, seed=seed, diagnostics=diagnostics, calibration_options=calibration)

    def run(data, case, samples):
        return jax.lax.map(lambda a: score(data, a[0], a[1]), (case, samples), batch_size=batch_size)

    return deferred.functionalize(run)(data, case, samples)


def evaluate(
    workdir, task: str, samples, *, name: str = "file", cases_file=None, wall_time_s: float = 0.0,
    figures: bool = False, progress: bool = False,
) -> list[record_store.Record]:  # fmt: skip
    """Score the samples at `samples` (a path, `readers`) for `task` of the study in `workdir`.

    `name`: the sampler label of the records (refused when `results.jsonl` already holds
    records of (task, name): every earlier record is kept); `cases_file`: score on the cases
    of this file (export format or PosteriorBench rows) in place of the study's;
    `wall_time_s`: the sampler's time per case, as the caller measured it (recorded as is;
    0 = unknown). Writes the tables (`results.csv`, `summary.md`) and, with `figures`, the
    figures. With `progress`, a line as each stage starts and ends (`console.Steps`). Returns
    the new records.
    """
    steps = console.Steps("evaluate", 5 + bool(figures), enabled=progress)
    steps("reading the study")
    name = checks.path_component("name", name)  # a file name under workdir/samples/<task>/
    workdir = Path(workdir)
    config = study_config(workdir)
    if task not in config.tasks:
        raise ValueError(f"task: the study in {workdir} has tasks {sorted(config.tasks)}, got {task!r}")
    cases_source = "study"
    if cases_file is not None:
        cases_source = cases_label(cases_file)
        with config.unlocked():
            config.cases_files = {**dict(config.get("cases_files", {})), task: str(cases_file)}
    s = settings(config)
    plan = Plan.build(s)
    results = record_store.ResultsFile(workdir / "results.jsonl", record_store.workdir_config_hash(workdir))
    if results.done((task, name)):
        raise ValueError(
            f"name: {workdir}/results.jsonl already holds records of sampler {name!r} on task {task!r}; "
            "pass another --name (earlier records are never replaced)"
        )
    t, ids, cases = plan.tasks[task], plan.case_ids(task), plan.cases(task)
    steps(f"reading the samples of {len(ids)} case(s) from {samples}")
    x = readers.read_samples(samples, ids, t.unknown_shape, task=task)
    steps(f"the reference posterior of {task} (read from the workdir, or built)")
    reference = plan.reference(task, workdir, lead=True, progress=False)[:2]
    steps(
        f"scoring {len(ids)} case(s) x {x.shape[1]} samples (compiling the scoring program, then running it)"
    )
    data = statistics.program_data(t, cases, reference, seed=s.seed)
    grid = program.expand(len(ids), {}, (SEED,), {})
    options = (s.seed, tuple(s.diagnostics), s.calibration, s.batch_size)
    failure, metrics = _score_all(t, options, data, jnp.asarray(grid.case), jnp.asarray(x))
    deferred.raise_failure(failure, f"{task}/{name}")
    metrics = jax.device_get(metrics)
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
        )  # fmt: skip
        for i in range(grid.size)
    ]
    results.append(records)
    if s.save_samples:
        keep = [i for i in range(grid.size) if grid.case[i] < s.save_samples]
        samples_store.write_samples(
            workdir / "samples" / task / f"{name}.npz",
            {"samples": x[grid.case[keep]], "case": grid.case[keep], "seed": grid.seed[keep],
             "config_id": np.asarray([config_ids[i] for i in keep])},
        )  # fmt: skip
    from posteriorjax.report import tables

    tables.write_tables(workdir, results.records)
    if figures:
        from posteriorjax.sweep.run import _render_figures

        steps("drawing the figures")
        _render_figures(workdir, progress=False)
    steps.close()
    return records
