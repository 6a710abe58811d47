"""Run: a whole study, config -> workdir (parse -> plan -> program -> store).

`run(config, workdir)` parses the config (`settings`), builds the plan (`plan`), then per
task loads or builds its reference (`reference.registry`, cached in `workdir/references/`)
and per sampler entry trains or reuses its networks (`networks`) and runs the pair
(`run_pair`: the compiled `program`, chunk by chunk, records appended to the `store`), then
writes `references.json`. The tables and figures are a separate stage (`report.stage.write`)
that the entry points call afterwards. A rerun skips the configurations
already on disk. With several processes (`jax.process_count() > 1`) each process writes the
records its devices computed to `results.p<k>.jsonl` and process 0 assembles `results.jsonl`
after every pair (the workdir must be shared by all processes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from posteriorjax import files, parallel
from posteriorjax import plugins as plugin_modules
from posteriorjax.reference import heldout
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.sweep import program, statistics
from posteriorjax.sweep import store as record_store
from posteriorjax.sweep.plan import Plan, sync
from posteriorjax.sweep.samples import save_samples
from posteriorjax.sweep.settings import SamplerEntry, settings
from posteriorjax.tasks.base import Cases, Task


def run_pair(
    task: Task, sampler: AbstractSampler, cases: Cases, reference: tuple, grid: program.ConfigGrid, *,
    num_samples: int, seed: int, chunk_size: int, batch_size: int,
    results: record_store.ResultsFile | None = None, skip: set[str] | None = None,
    labels: Mapping[str, str] | None = None, mesh=None, metric_options: Mapping | None = None,
    diagnostics: Sequence[str] = (), progress: Callable | None = None, calibration_options=None,
    memory_limit_bytes: int | None = None, networks: Mapping | None = None,
    scored: Mapping | None = None,
) -> list[record_store.Record]:  # fmt: skip
    """Sample and score every configuration of `grid` for one (task, sampler) pair.

    `task` is the true task (`sampler.task` may be a misspecified copy with the same shapes);
    `reference`: `(ref_samples (K, M, C, H, W), ref_weights (K, M))`. Chunks of `chunk_size`
    configurations (rounded up to a multiple of the device count) are compiled once and their
    records appended to `results` (this process's file) as they finish; `skip`: ids not to
    compute (default: those in `results`); `labels`: the recorded `{"task", "sampler"}` names;
    `progress(done, todo, compile_s, run_s)` after each chunk. The compiled chunk program's
    memory estimate is checked against the device (`program.check_memory`, `memory_limit_bytes`)
    before it runs. Hyperparameter values and reference weights are checked on the host before
    anything compiles (`program.check_inputs`); the program's own run-time checks come back
    as an output, raised here after each chunk (`program.raise_failure`, a ValueError naming
    the pair, the check and the offending value). `networks`: what the sampler's trained
    networks are (`Plan.network_records`), carried by every record; `scored`: what the records
    were scored on (`Record.scored`: the reference set's `heldout.tag`). Returns this call's
    records.
    """
    mesh = parallel.data_mesh() if mesh is None else mesh
    labels = {"task": task.name, "sampler": sampler.name, **(labels or {})}
    chunk = parallel.padded_size(max(1, min(chunk_size, grid.size)), mesh)
    ids = grid.ids()
    if skip is None:
        skip = results.done((labels["task"], labels["sampler"])) if results else set()
    todo = [i for i, cid in enumerate(ids) if cid not in skip]
    where = f"{labels['task']} / {labels['sampler']}"
    program.check_inputs(sampler, grid, reference, where)
    data = statistics.program_data(task, cases, reference, seed=seed)
    data = parallel.global_tree(data, parallel.replicated(mesh))
    one = program.case_program(
        task, sampler, num_samples, seed=seed, metric_options=metric_options, diagnostics=diagnostics,
        calibration_options=calibration_options,
    )  # fmt: skip
    fn = eqx.filter_jit(program.checked_chunk_program(one, mesh, batch_size))
    compiled, compile_s, out = None, 0.0, []
    for start in range(0, len(todo), chunk):
        index = np.asarray(todo[start : start + chunk])
        padded = np.concatenate([index, np.repeat(index[-1:], chunk - len(index))])
        configs = parallel.global_tree(grid.take(padded), parallel.batch_sharding(mesh))
        t0 = time.perf_counter()
        if compiled is None:
            compiled = fn.lower(data, configs).compile()
            compile_s = time.perf_counter() - t0
            program.check_memory(
                compiled, where, batch_size=batch_size, num_samples=num_samples, limit=memory_limit_bytes
            )  # fmt: skip
        t1 = time.perf_counter()
        failure, metrics = jax.block_until_ready(compiled(data, configs))
        run_s = time.perf_counter() - t1
        program.raise_failure(failure, where)
        rows, values = program.local_rows(metrics)
        fields = dict(num_samples=num_samples, wall_time_s=run_s / chunk, compile_time_s=compile_s)
        fields["networks"] = dict(networks or {})
        fields["scored"] = dict(scored or {})
        records = [
            _record(grid, ids, int(index[pos]), {k: v[j] for k, v in values.items()}, labels, task, fields)
            for j, pos in enumerate(rows)
            if pos < len(index)  # not padding
        ]
        if results is not None and records:
            results.append(records)
        out.extend(records)
        if progress is not None:
            progress(min(start + chunk, len(todo)), len(todo), t1 - t0 if start == 0 else 0.0, run_s)
    return out


def _record(grid, ids, i: int, metrics: dict, labels, task: Task, fields: dict) -> record_store.Record:
    return record_store.Record(
        task=labels["task"], sampler=labels["sampler"], config_id=ids[i], index=i, case=int(grid.case[i]),
        seed=int(grid.seed[i]), hparams={k: float(v[i]) for k, v in grid.hparams.items()},
        num_samples=fields["num_samples"], metrics={k: record_store.jsonable(v) for k, v in metrics.items()},
        wall_time_s=fields["wall_time_s"], compile_time_s=fields["compile_time_s"],
        evaluation=task.evaluation_name, networks=fields["networks"],
        scored=fields.get("scored", {}),
    )  # fmt: skip


STAGES = ("all", "networks")


def run(
    config, workdir: str | os.PathLike, *, progress: bool = True, plugins: Sequence[str] = (),
    memory_limit_bytes: int | None = None, stage: str = "all",
) -> list[record_store.Record]:  # fmt: skip
    """Run every (task, sampler) pair of `config`; store its records, references, samples and
    provenance in `workdir`. The tables and figures are the next stage, `report.stage.write(workdir)`,
    which the entry points call after this one.

    `stage`: ``"all"`` (the study), or ``"networks"``: train (or resume) every network the study
    needs, samplers' and references' alike, under `workdir/networks/`, and stop there (returns
    []): the long training runs of a study, interruptible and resumed by the next call of
    either stage, which then trains nothing.

    `plugins`: modules registering out-of-tree samplers/tasks (`posteriorjax.plugins.load`, a
    no-op for loaded ones), recorded in `provenance.json` so a report or a resume can name them.
    Each pair's compiled program is checked against the device memory before it runs
    (`program.check_memory`; `memory_limit_bytes`, default $POSTERIORJAX_MEMORY_LIMIT_BYTES, the
    accelerator's memory or the machine's RAM). With a cap given, every pair whose sampler needs
    no trained network is also compiled on abstract inputs before any reference is built
    (`estimate_memory`), at the price of compiling those programs twice.
    Returns the records of `results.jsonl` (process 0; other processes return []).
    """
    if stage not in STAGES:
        raise ValueError(f"stage: expected one of {STAGES}, got {stage!r}")
    plugins = plugin_modules.parse(plugins)
    plugin_modules.load(plugins)
    needed = plugin_modules.required_names(json.loads(config.to_json_best_effort()))
    plugin_modules.check_names(*needed, plugins or plugin_modules.recorded(workdir))
    s = settings(config)
    plan = Plan.build(s).prepare()
    estimate_memory(plan, memory_limit_bytes)
    workdir, lead, multi = Path(workdir), jax.process_index() == 0, jax.process_count() > 1
    store = record_store.prepare_workdir(workdir, config) if lead else None
    own = store
    if multi:
        config_hash = record_store.config_hash(json.loads(config.to_json_best_effort(sort_keys=True)))
        own = record_store.ResultsFile(
            record_store.process_results_path(workdir, jax.process_index()), config_hash
        )
    sync("sweep-prepare")
    if lead:
        prov = files.provenance({"seed": s.seed, "sampler_seeds": list(s.seeds)})
        prov["plugins"] = plugins
        (workdir / "provenance.json").write_text(json.dumps(prov, indent=2))
    if stage == "networks":
        _train_networks(plan, workdir, progress)
        return []
    study = _Study(plan, workdir, store, own, parallel.data_mesh(), progress, memory_limit_bytes)
    reports = {}
    for task_name in s.tasks:
        start = time.perf_counter()
        *reference, reports[task_name] = plan.reference(task_name, workdir, lead=lead, progress=progress)
        study.bar.add("reference", time.perf_counter() - start, of=len(s.tasks))
        scored = {"reference": heldout.tag(reports[task_name]["set"], *reference, reports[task_name])}
        for entry in (e for e in s.samplers if task_name in e.tasks):
            study.pair(task_name, entry, tuple(reference), scored)
    if not lead:
        return []
    files.atomic_write_json(workdir / "references.json", reports)
    return store.records


def _train_networks(plan: Plan, workdir: Path, progress: bool) -> None:
    """Train or load every network of the study: each task's reference surrogate and each entry's."""
    s = plan.settings
    for task_name in s.tasks:
        if s.reference_networks.get(task_name) is not None and task_name not in plan.given:
            plan.reference_network(task_name, workdir, progress)
        for entry in (e for e in s.samplers if task_name in e.tasks):
            plan.networks(task_name, entry, workdir, progress)


@dataclasses.dataclass
class _Study:
    """What every pair of a run shares: the plan, the stores, the mesh, the trained networks."""

    plan: Plan
    workdir: Path
    store: record_store.ResultsFile | None  # results.jsonl (process 0 only)
    own: record_store.ResultsFile | None  # this process's records
    mesh: Any
    progress: bool
    memory_limit_bytes: int | None = None

    def __post_init__(self):
        lead = self.store is not None
        self.bar = _study_progress(self.plan, self.workdir, self.store, enabled=self.progress and lead)

    def pair(self, task_name: str, entry: SamplerEntry, reference: tuple, scored: Mapping | None = None):
        """Train or reuse the entry's networks, run the pair, assemble its records, store its samples."""
        s, plan, pair = self.plan.settings, self.plan, (task_name, entry.label)
        start = time.perf_counter()
        nets = plan.networks(task_name, entry, self.workdir, self.progress)
        network_records = plan.network_records(task_name, entry, self.workdir)
        train_s = time.perf_counter() - start
        sampler, grid = plan.pair(task_name, entry, nets)
        if entry.calibrate is not None:  # the hyperparameter chosen on validation cases first
            from posteriorjax.sweep import calibrate

            grid = plan.grids[pair] = calibrate.stage(self, task_name, entry, sampler)
        multi = jax.process_count() > 1
        skip = record_store.done_everywhere(self.workdir, pair) if multi else self.store.done(pair)
        self.bar.start_pair(f"{task_name} / {entry.label}", len(set(grid.ids()) - skip), grid.size)
        self.bar.add("train", train_s, of=self.bar.pairs)  # networks trained, or read from the workdir
        run_pair(
            plan.tasks[task_name], sampler, plan.cases(task_name), reference, grid,
            num_samples=s.num_samples, seed=s.seed, chunk_size=s.chunk_size, batch_size=s.batch_size,
            results=self.own, skip=skip, labels={"task": task_name, "sampler": entry.label}, mesh=self.mesh,
            diagnostics=s.diagnostics, progress=lambda done, _, c, r: self.bar.chunk(done, c, r),
            calibration_options=s.calibration, memory_limit_bytes=self.memory_limit_bytes,
            networks=network_records, scored=scored,
        )  # fmt: skip
        sync(f"sweep-pair-{task_name}-{entry.label}")
        if self.store is None:
            return
        if multi:
            record_store.assemble(self.workdir, self.store, pair)
        if s.save_samples:
            stored = int((grid.case < s.save_samples).sum())
            with self.bar.stage(
                "samples", f"storing the samples of {stored} configuration(s)", of=self.bar.pairs
            ):
                save_samples(
                    self.workdir / "samples" / task_name / f"{entry.label}.npz", sampler,
                    plan.cases(task_name), grid, num_samples=s.num_samples, seed=s.seed,
                    max_case=s.save_samples, batch_size=s.batch_size,
                )  # fmt: skip


def estimate_memory(plan: Plan, limit: int | None = None, mesh=None) -> None:
    """Compile each built pair's chunk program on abstract inputs (the reference as a
    `ShapeDtypeStruct` of its configured `num_samples`) and `program.check_memory` it: a
    program that cannot fit stops the sweep before any reference or sample is computed. Only
    with a cap (`limit`, $POSTERIORJAX_MEMORY_LIMIT_BYTES): the executable is not reused, so this
    doubles those pairs' compile time; without one each pair is checked when it compiles."""
    if limit is None and not os.environ.get(program.MEMORY_LIMIT_ENV):
        return  # no cap: each pair is still checked when it compiles (`run_pair`), not compiled twice
    s, mesh = plan.settings, parallel.data_mesh() if mesh is None else mesh
    for (task_name, label), sampler in plan.samplers.items():
        task, size = plan.tasks[task_name], s.references[task_name].get("num_samples")
        if size is None:
            continue  # checked when the pair compiles (`run_pair`)
        cases, grid = plan.cases(task_name), plan.grids[task_name, label]
        k, shape = s.num_cases, tuple(task.unknown_shape)
        placeholder = (np.zeros((k, 1, *shape), np.float32), np.ones((k, 1), np.float32))
        data = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
            statistics.program_data(task, cases, placeholder, seed=s.seed),
        )
        data["ref_samples"] = jax.ShapeDtypeStruct((k, int(size), *shape), np.float32)
        data["ref_weights"] = jax.ShapeDtypeStruct((k, int(size)), np.float32)
        chunk = parallel.padded_size(max(1, min(s.chunk_size, grid.size)), mesh)
        configs = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), grid.take(np.zeros(chunk, int))
        )
        one = program.case_program(
            task, sampler, s.num_samples, seed=s.seed, diagnostics=s.diagnostics,
            calibration_options=s.calibration,
        )  # fmt: skip
        fn = jax.jit(program.checked_chunk_program(one, mesh, s.batch_size))
        compiled = fn.lower(data, configs).compile()
        program.check_memory(
            compiled,
            f"{task_name} / {label}",
            batch_size=s.batch_size,
            num_samples=s.num_samples,
            limit=limit,
        )


def _study_progress(plan: Plan, workdir: Path, store, *, enabled: bool):
    """`console.StudyProgress` over every (task, sampler) pair of the study, resumed records counted."""
    from posteriorjax import console

    s, sizes, done = plan.settings, [], 0
    for task_name, entry in s.pairs():
        sizes.append(s.num_cases * math.prod(len(v) for v in entry.axes.values()) * len(s.seeds))
        pair = (task_name, entry.label)
        done += len(store.done(pair) if store is not None else record_store.done_everywhere(workdir, pair))
    return console.StudyProgress(len(sizes), sum(sizes), min(done, sum(sizes)), enabled=enabled)
