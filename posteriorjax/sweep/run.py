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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from posteriorjax import console, files, parallel
from posteriorjax import plugins as plugin_modules
from posteriorjax.reference import heldout
from posteriorjax.samplers import precision
from posteriorjax.sweep import calibrate, migrate, program, statistics
from posteriorjax.sweep import store as record_store
from posteriorjax.sweep.pair import balanced_chunk, run_pair
from posteriorjax.sweep.plan import Plan, sync
from posteriorjax.sweep.samples import save_samples
from posteriorjax.sweep.settings import SamplerEntry, settings

STAGES = ("all", "networks")
"""The values of `run`'s `stage`: the whole sweep, or only the networks it trains."""


def run(
    config,
    workdir: str | os.PathLike,
    *,
    progress: bool = True,
    plugins: Sequence[str] = (),
    memory_limit_bytes: int | None = None,
    stage: str = "all",
) -> list[record_store.Record]:
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
    migrate.check(workdir)  # an earlier version's workdir is migrated explicitly, never on read
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
            grid = plan.grids[pair] = calibrate.stage(self, task_name, entry, sampler)
        multi = jax.process_count() > 1
        skip = record_store.done_everywhere(self.workdir, pair) if multi else self.store.done(pair)
        self.bar.start_pair(f"{task_name} / {entry.label}", len(set(grid.ids()) - skip), grid.size)
        self.bar.add("train", train_s, of=self.bar.pairs)  # networks trained, or read from the workdir
        run_pair(
            plan.tasks[task_name],
            sampler,
            plan.cases(task_name),
            reference,
            grid,
            num_samples=s.num_samples,
            seed=s.seed,
            chunk_size=s.chunk_size,
            batch_size=s.batch_size,
            results=self.own,
            skip=skip,
            labels={"task": task_name, "sampler": entry.label},
            mesh=self.mesh,
            diagnostics=s.diagnostics,
            progress=lambda done, _, c, r: self.bar.chunk(done, c, r),
            calibration_options=s.calibration,
            memory_limit_bytes=self.memory_limit_bytes,
            networks=network_records,
            scored=scored,
        )
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
                    self.workdir / "samples" / task_name / f"{entry.label}.npz",
                    sampler,
                    plan.cases(task_name),
                    grid,
                    num_samples=s.num_samples,
                    seed=s.seed,
                    max_case=s.save_samples,
                    batch_size=s.batch_size,
                )


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
        with precision.scope(sampler):
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
            chunk = balanced_chunk(grid.size, s.chunk_size, mesh.devices.size, s.batch_size)
            configs = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), grid.take(np.zeros(chunk, int))
            )
            one = program.case_program(
                task,
                sampler,
                s.num_samples,
                seed=s.seed,
                diagnostics=s.diagnostics,
                calibration_options=s.calibration,
            )
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
    s, sizes, done = plan.settings, [], 0
    for task_name, entry in s.pairs():
        sizes.append(s.num_cases * math.prod(len(v) for v in entry.axes.values()) * len(s.seeds))
        pair = (task_name, entry.label)
        done += len(store.done(pair) if store is not None else record_store.done_everywhere(workdir, pair))
    return console.StudyProgress(len(sizes), sum(sizes), min(done, sum(sizes)), enabled=enabled)
