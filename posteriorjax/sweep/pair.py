"""One (task, sampler) pair: every configuration of its grid sampled and scored by one compiled,
sharded program, chunk by chunk, its records appended to the store as each chunk finishes.

`run_pair` is what the study (`run.run`), a calibration stage (`calibrate.stage`) and the
benchmarks call; it knows nothing of workdirs, references or networks beyond what it is given.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import numpy as np

from posteriorjax import parallel
from posteriorjax.samplers import precision
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.sweep import program, statistics
from posteriorjax.sweep import store as record_store
from posteriorjax.tasks.base import Cases, Task


def run_pair(
    task: Task,
    sampler: AbstractSampler,
    cases: Cases,
    reference: tuple,
    grid: program.ConfigGrid,
    *,
    num_samples: int,
    seed: int,
    chunk_size: int,
    batch_size: int,
    results: record_store.ResultsFile | None = None,
    skip: set[str] | None = None,
    labels: Mapping[str, str] | None = None,
    mesh=None,
    metric_options: Mapping | None = None,
    diagnostics: Sequence[str] = (),
    progress: Callable | None = None,
    calibration_options=None,
    memory_limit_bytes: int | None = None,
    networks: Mapping | None = None,
    scored: Mapping | None = None,
) -> list[record_store.Record]:
    """Sample and score every configuration of `grid` for one (task, sampler) pair.

    `task` is the true task (`sampler.task` may be a misspecified copy with the same shapes);
    `reference`: `(ref_samples (K, M, C, H, W), ref_weights (K, M))`. Chunks of `chunk_size`
    configurations (`balanced_chunk`: the least padding, a multiple of the device count) are
    compiled once and their records appended to `results` (this process's file) as they finish;
    `skip`: ids not to compute (default: those in `results`); `labels`: the recorded
    `{"task", "sampler"}` names;
    `progress(done, todo, compile_s, run_s)` after each chunk. The compiled chunk program's
    memory estimate is checked against the device (`program.check_memory`, `memory_limit_bytes`)
    before it runs. Hyperparameter values and reference weights are checked on the host before
    anything compiles (`program.check_inputs`); the program's own run-time checks come back
    as an output, raised here after each chunk (`program.raise_failure`, a ValueError naming
    the pair, the check and the offending value). `networks`: what the sampler's trained
    networks are (`Plan.network_records`), carried by every record; `scored`: what the records
    were scored on (`Record.scored`: the reference set's `heldout.tag`). A sampler that integrates
    in float64 (``precision="float64"``) runs inside `samplers.precision.scope` (JAX's x64 mode):
    its samples and the metrics computed from them are float64, written to the records as floats.
    Returns this call's records.
    """
    with precision.scope(sampler):  # a float64 sampler: its program traced, compiled and run in x64
        mesh = parallel.data_mesh() if mesh is None else mesh
        labels = {"task": task.name, "sampler": sampler.name, **(labels or {})}
        ids = grid.ids()
        if skip is None:
            skip = results.done((labels["task"], labels["sampler"])) if results else set()
        todo = [i for i, cid in enumerate(ids) if cid not in skip]
        chunk = balanced_chunk(len(todo), chunk_size, mesh.devices.size, batch_size)
        where = f"{labels['task']} / {labels['sampler']}"
        program.check_inputs(sampler, grid, reference, where)
        data = statistics.program_data(task, cases, reference, seed=seed)
        data = parallel.global_tree(data, parallel.replicated(mesh))
        one = program.case_program(
            task,
            sampler,
            num_samples,
            seed=seed,
            metric_options=metric_options,
            diagnostics=diagnostics,
            calibration_options=calibration_options,
        )
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
                )
            t1 = time.perf_counter()
            failure, metrics = jax.block_until_ready(compiled(data, configs))
            run_s = time.perf_counter() - t1
            program.raise_failure(failure, where)
            rows, values = program.local_rows(metrics)
            fields = dict(num_samples=num_samples, wall_time_s=run_s / chunk, compile_time_s=compile_s)
            fields["networks"] = dict(networks or {})
            fields["scored"] = dict(scored or {})
            records = [
                _record(
                    grid,
                    ids,
                    int(index[pos]),
                    metrics={k: v[j] for k, v in values.items()},
                    labels=labels,
                    task=task,
                    fields=fields,
                )
                for j, pos in enumerate(rows)
                if pos < len(index)  # not padding
            ]
            if results is not None and records:
                results.append(records)
            out.extend(records)
            if progress is not None:
                progress(min(start + chunk, len(todo)), len(todo), t1 - t0 if start == 0 else 0.0, run_s)
        return out


def balanced_chunk(todo: int, chunk_size: int, devices: int, batch_size: int = 1) -> int:
    """The configurations per compiled call of `todo` configurations: the size of at most
    `chunk_size` (rounded up to a whole unit) that repeats the fewest configurations to fill its
    last call, the largest such (fewest calls) on a tie. Every call has this one shape, so its
    padding costs as much as real work on any device: 20 configurations in chunks of 8 and
    batches of 2 run as 5 x 4, not 3 x 8 with 4 repeated. The unit is `devices * batch_size`
    where each device's share reaches a whole batch (`lax.map` then runs whole batches and
    compiles one body; a remainder batch compiles the whole program a second time), else
    `devices`."""
    per_call = max(1, min(chunk_size, todo))
    unit = devices * batch_size if per_call >= devices * batch_size else devices
    sizes = range(unit, math.ceil(per_call / unit) * unit + 1, unit)
    return min(sizes, key=lambda size: (math.ceil(todo / size) * size, -size))


def _record(grid, ids, i: int, *, metrics: dict, labels, task: Task, fields: dict) -> record_store.Record:
    return record_store.Record(
        task=labels["task"],
        sampler=labels["sampler"],
        config_id=ids[i],
        index=i,
        case=int(grid.case[i]),
        seed=int(grid.seed[i]),
        hparams={k: float(v[i]) for k, v in grid.hparams.items()},
        num_samples=fields["num_samples"],
        metrics={k: record_store.jsonable(v) for k, v in metrics.items()},
        wall_time_s=fields["wall_time_s"],
        compile_time_s=fields["compile_time_s"],
        evaluation=task.evaluation_name,
        networks=fields["networks"],
        scored=fields.get("scored", {}),
    )
