"""Sweep engine: cases x hyperparameters x seeds as one compiled, sharded program.

For one (task, sampler) pair, every configuration -- a case index, a value of
each numeric hyperparameter axis and a sampler seed -- is one entry of a single
flattened axis. One function samples *and scores* a configuration; it is
`lax.map`-ped over a device's share of a chunk (memory bounded by
`batch_size`), `shard_map`-ped over the 1-D data mesh of all devices, and
compiled once ahead of time for the chunk shape. Chunks are written to
`results.jsonl` as they finish; a rerun skips configurations already on disk,
so an interrupted sweep resumes without recomputing or duplicating records.

The key of a configuration is `fold_in(fold_in(key(seed), case), sampler_seed)`:
results do not depend on chunking, ordering or the number of devices.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.sharding import PartitionSpec

from posteriorjax import parallel
from posteriorjax.metrics import suite
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.tasks.base import Cases, Task


@dataclasses.dataclass(frozen=True)
class ConfigGrid:
    """The flattened configuration axis: `case (K,)`, `seed (K,)`, `hparams {name: (K,)}`."""

    case: np.ndarray
    seed: np.ndarray
    hparams: dict[str, np.ndarray]

    @property
    def size(self) -> int:
        return int(self.case.shape[0])

    def ids(self) -> list[str]:
        """A stable identifier per configuration (case, seed and hyperparameter values)."""
        names = sorted(self.hparams)
        return [
            f"case={c};seed={s};" + ";".join(f"{n}={self.hparams[n][i]!r}" for n in names)
            for i, (c, s) in enumerate(zip(self.case.tolist(), self.seed.tolist(), strict=True))
        ]


def expand(
    num_cases: int, axes: Mapping[str, Iterable[float]], seeds: Iterable[int], defaults: Mapping
) -> ConfigGrid:
    """Product of cases x axis values x seeds, flattened (cases vary slowest).

    `axes` names hyperparameters that vary; every other hyperparameter takes
    its value from `defaults`. An axis with no values or an unknown name is an error.
    """
    unknown = sorted(set(axes) - set(defaults))
    if unknown:
        raise ValueError(f"axes: unknown hyperparameter(s) {unknown}; the sampler has {sorted(defaults)}")
    axes = {k: [float(v) for v in vals] for k, vals in axes.items()}
    empty = [k for k, v in axes.items() if not v]
    if empty:
        raise ValueError(f"axes: axis {empty} has no values")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds: expected at least one sampler seed, got none")
    if num_cases < 1:
        raise ValueError(f"num_cases: expected >= 1, got {num_cases}")
    names = sorted(axes)
    rows = list(itertools.product(range(num_cases), *(axes[n] for n in names), seeds))
    cols = list(zip(*rows, strict=True))
    hparams = {k: np.full(len(rows), float(v), np.float32) for k, v in defaults.items()}
    for j, n in enumerate(names):
        hparams[n] = np.asarray(cols[1 + j], np.float32)
    return ConfigGrid(np.asarray(cols[0], np.int32), np.asarray(cols[-1], np.int32), hparams)


def case_program(
    task: Task, sampler: AbstractSampler, num_samples: int, *, base_key, metric_options: Mapping | None = None
) -> Callable:
    """`one(data, config) -> metrics`: sample and score one configuration (pure)."""
    options = dict(metric_options or {})

    def one(data, config):
        case = config["case"]
        key = jr.fold_in(jr.fold_in(base_key, case), config["seed"])
        y_obs = data["y_obs"][case]
        samples = sampler._sample(key, y_obs, num_samples, sampler.check_hparams(config["hparams"]))
        return suite.compute(
            samples,
            data["ref_samples"][case],
            data["ref_weights"][case],
            data["x_true"][case],
            evaluation_field=task.evaluation_field,
            field_stats=task.field_stats,
            forward=task.forward,
            y_obs=y_obs,
            noise_std=task.noise_std,
            **options,
        )

    return one


def chunk_program(one: Callable, mesh, batch_size: int) -> Callable:
    """`(data, configs (chunk,)) -> metrics (chunk,)`: lax.map per device, shard_map over the mesh."""
    spec = PartitionSpec(parallel.AXIS)

    def local(data, configs):
        return jax.lax.map(lambda c: one(data, c), configs, batch_size=batch_size)

    return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), spec), out_specs=spec, check_vma=False)


def _jsonable(value):
    arr = np.asarray(value)
    if arr.ndim == 0:
        v = arr.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    return [_jsonable(v) for v in arr]


class ResultsFile:
    """Append-only JSON-lines records with crash-safe resume.

    Each chunk's records are appended in one write and fsync-ed. On open, a
    torn last line (from a kill mid-write) is dropped and the file rewritten
    atomically, so every stored line is a complete record.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.records: list[dict] = []
        if self.path.exists():
            lines = self.path.read_text().splitlines()
            good = []
            for line in lines:
                try:
                    good.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a torn tail; everything after it is dropped
            if len(good) != len(lines):
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text("".join(json.dumps(r) + "\n" for r in good))
                os.replace(tmp, self.path)
            self.records = good

    def done(self, pair: tuple[str, str]) -> set[str]:
        return {r["config_id"] for r in self.records if (r["task"], r["sampler"]) == pair}

    def append(self, records: list[dict]) -> None:
        with open(self.path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records))
            f.flush()
            os.fsync(f.fileno())
        self.records.extend(records)


def run_pair(
    task: Task,
    sampler: AbstractSampler,
    cases: Cases,
    reference: tuple[jax.Array, jax.Array],
    grid: ConfigGrid,
    *,
    num_samples: int,
    seed: int,
    chunk_size: int,
    batch_size: int,
    results: ResultsFile | None = None,
    labels: Mapping[str, str] | None = None,
    mesh=None,
    metric_options: Mapping | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Sample and score every configuration of `grid` for one (task, sampler) pair.

    Args:
      cases: the benchmark cases (`x_true`, `y_obs` indexed by `grid.case`).
      reference: `(ref_samples (num_cases, M, C, H, W), ref_weights (num_cases, M))`.
      chunk_size: configurations per compiled call (rounded up to a multiple of
        the device count); results are written after each chunk.
      batch_size: configurations vmapped at once on a device (memory bound).
      results: where finished records go and which are skipped; None keeps them in memory.
      labels: `{"task": ..., "sampler": ...}` names recorded (default: registry-style names).

    Returns:
      The records computed in this call (skipped ones excluded).
    """
    mesh = parallel.data_mesh() if mesh is None else mesh
    labels = {"task": task.name, "sampler": sampler.name, **(labels or {})}
    chunk = parallel.padded_size(max(1, min(chunk_size, grid.size)), mesh)
    ids = grid.ids()
    done = results.done((labels["task"], labels["sampler"])) if results else set()
    todo = [i for i, cid in enumerate(ids) if cid not in done]
    ref_samples, ref_weights = reference
    data = {
        "y_obs": jnp.asarray(cases.y_obs),
        "x_true": jnp.asarray(cases.x_true),
        "ref_samples": jnp.asarray(ref_samples),
        "ref_weights": jnp.asarray(ref_weights),
    }
    data = jax.device_put(data, parallel.replicated(mesh))
    one = case_program(task, sampler, num_samples, base_key=jr.key(seed), metric_options=metric_options)
    program = eqx.filter_jit(chunk_program(one, mesh, batch_size))
    configs_all = {"case": grid.case, "seed": grid.seed, "hparams": grid.hparams}

    compiled, compile_s, out = None, 0.0, []
    for start in range(0, len(todo), chunk):
        index = np.asarray(todo[start : start + chunk])
        padded = np.concatenate([index, np.repeat(index[-1:], chunk - len(index))])
        configs = jax.tree.map(lambda a, p=padded: a[p], configs_all)
        configs = jax.device_put(configs, parallel.batch_sharding(mesh))
        if compiled is None:
            t0 = time.perf_counter()
            compiled = program.lower(data, configs).compile()
            compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        metrics = jax.device_get(jax.block_until_ready(compiled(data, configs)))
        wall = (time.perf_counter() - t0) / chunk
        records = []
        for j, i in enumerate(index.tolist()):
            rec = {
                "task": labels["task"],
                "sampler": labels["sampler"],
                "config_id": ids[i],
                "case": int(grid.case[i]),
                "seed": int(grid.seed[i]),
                "hparams": {k: float(v[i]) for k, v in grid.hparams.items()},
                "num_samples": num_samples,
                "metrics": {k: _jsonable(v[j]) for k, v in metrics.items()},
                "wall_time_s": wall,
                "compile_time_s": compile_s,
                "evaluation": task.evaluation_name,
            }
            records.append(rec)
        if results is not None:
            results.append(records)
        out.extend(records)
        if progress is not None:
            progress(min(start + chunk, len(todo)), len(todo))
    return out


# ----------------------------------------------------------------------------
# The whole study: config -> workdir


def _as_dict(section) -> dict:
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)


def validate(config) -> None:
    """Check names and axes of a sweep config before any compute (ValueError naming the field)."""
    from posteriorjax import samplers, tasks

    if not _as_dict(config.tasks):
        raise ValueError("config.tasks: expected at least one task")
    if not _as_dict(config.samplers):
        raise ValueError("config.samplers: expected at least one sampler")
    for name in _as_dict(config.tasks):
        if name not in tasks.names():
            raise ValueError(f"config.tasks: unknown task {name!r}; registered tasks: {tasks.names()}")
    for name, entry in _as_dict(config.samplers).items():
        sampler_name = entry.get("sampler", name)
        if sampler_name not in samplers.names():
            raise ValueError(
                f"config.samplers.{name}: unknown sampler {sampler_name!r}; registered: {samplers.names()}"
            )
        for axis, values in entry.get("axes", {}).items():
            if len(values) == 0:
                raise ValueError(f"config.samplers.{name}.axes.{axis}: axis has no values")
    if config.reference.method not in REFERENCE_METHODS:
        raise ValueError(
            f"config.reference.method: expected one of {sorted(REFERENCE_METHODS)}, "
            f"got {config.reference.method!r}"
        )
    for field in ("num_cases", "num_samples", "chunk_size", "batch_size"):
        if int(config[field]) < 1:
            raise ValueError(f"config.{field}: expected a positive integer, got {config[field]}")


def reference_config(method: str = "exact", num_samples: int = 100, **mcmc):
    """The `config.reference` section: method, ensemble size and pCN settings (all keys present)."""
    import ml_collections

    section = ml_collections.ConfigDict(
        {"method": method, "num_samples": num_samples, "num_chains": 16, "burn_in": 2000, "thin": 10}
    )
    section.update(mcmc)
    return section


def _exact_reference(task: Task, cases: Cases, reference_config, key) -> tuple[jax.Array, jax.Array]:
    """Exact posterior samples (linear-Gaussian tasks), uniform weights."""
    from posteriorjax.reference import exact

    num = int(reference_config.num_samples)
    samples = jnp.stack(
        [exact.sample(jr.fold_in(key, i), task, y, num) for i, y in enumerate(np.asarray(cases.y_obs))]
    )
    return samples, jnp.full(samples.shape[:2], 1.0 / num, samples.dtype)


def _pcn_reference(task: Task, cases: Cases, reference_config, key) -> tuple[jax.Array, jax.Array]:
    """pCN chains on the prior latent (any task); `num_samples` thinned draws over `num_chains` chains."""
    from posteriorjax.reference import mcmc

    rc = reference_config
    chains = int(rc.num_chains)
    if int(rc.num_samples) % chains:
        raise ValueError(
            f"config.reference.num_samples: expected a multiple of num_chains={chains}, got {rc.num_samples}"
        )
    samples = []
    for i, y in enumerate(np.asarray(cases.y_obs)):
        result = mcmc.run(
            jr.fold_in(key, i),
            task,
            jnp.asarray(y),
            num_chains=chains,
            num_draws=int(rc.num_samples) // chains,
            burn_in=int(rc.burn_in),
            thin=int(rc.thin),
        )
        samples.append(result.samples.reshape(-1, *task.unknown_shape))
    samples = jnp.stack(samples)
    return samples, jnp.full(samples.shape[:2], 1.0 / samples.shape[1], samples.dtype)


REFERENCE_METHODS: dict[str, Callable] = {"exact": _exact_reference, "pcn": _pcn_reference}


def prepare_workdir(workdir: Path, config) -> ResultsFile:
    """Create `workdir`, or resume it when it holds the same config; refuse a different one."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "config.json"
    current = json.loads(config.to_json_best_effort(sort_keys=True))
    current.pop("overwrite", None)
    if config_path.exists():
        stored = json.loads(config_path.read_text())
        stored.pop("overwrite", None)
        if stored != current:
            if not config.overwrite:
                raise ValueError(
                    f"workdir: {workdir} holds results of a different config; use another workdir "
                    "or pass --config.overwrite=True to discard them"
                )
            for name in ("results.jsonl", "results.csv", "summary.md"):
                (workdir / name).unlink(missing_ok=True)
    tmp = config_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=2, sort_keys=True))
    os.replace(tmp, config_path)
    return ResultsFile(workdir / "results.jsonl")


def run(config, workdir: str | os.PathLike, *, progress: bool = True) -> list[dict]:
    """Run every (task, sampler) pair of `config`; write results, tables and provenance into `workdir`."""
    from posteriorjax import results as results_lib
    from posteriorjax import samplers, tasks

    validate(config)
    workdir = Path(workdir)
    store = prepare_workdir(workdir, config) if jax.process_index() == 0 else None
    if jax.process_index() == 0:
        prov = results_lib.provenance({"seed": int(config.seed), "sampler_seeds": list(config.seeds)})
        (workdir / "provenance.json").write_text(json.dumps(prov, indent=2))
    mesh = parallel.data_mesh()
    for task_name, task_options in _as_dict(config.tasks).items():
        task = tasks.get(task_name, **task_options)
        cases = task.cases(int(config.seed), int(config.num_cases))
        ref_key = jr.fold_in(jr.key(int(config.seed)), 1)
        reference = REFERENCE_METHODS[config.reference.method](task, cases, config.reference, ref_key)
        for label, entry in _as_dict(config.samplers).items():
            sampler = samplers.get(entry.get("sampler", label), task, **entry.get("options", {}))
            grid = expand(int(config.num_cases), entry.get("axes", {}), config.seeds, sampler.defaults)

            def report(done, total, _pair=(task_name, label)):
                if progress:
                    print(f"[sweep] {_pair[0]} / {_pair[1]}: {done}/{total} configurations", flush=True)

            run_pair(
                task,
                sampler,
                cases,
                reference,
                grid,
                num_samples=int(config.num_samples),
                seed=int(config.seed),
                chunk_size=int(config.chunk_size),
                batch_size=int(config.batch_size),
                results=store,
                labels={"task": task_name, "sampler": label},
                mesh=mesh,
                progress=report,
            )
    if store is None:
        return []
    (workdir / "results.csv").write_text(results_lib.to_csv(store.records))
    table = results_lib.main_table(store.records)
    (workdir / "summary.md").write_text(table + "\n")
    if progress:
        print(table)
    return store.records
