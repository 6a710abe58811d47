"""Export: a study's cases, truths and reference posteriors as framework-neutral files.

`export(config, workdir)` writes, per task, `workdir/exchange/<task>/`:

  * `cases.npz` and `cases.h5` (same content): `case_ids (K,)`, `y_obs (K, M)`, `noise_std`,
    `field_mean`, `field_std`, `observation_mask (H, W)` and, for point sensors,
    `sensor_index (P, 2)` (`[row, col]` = `[y, x]`) and `sensor_position (P, 2)` (`[y, x]`,
    domain units); `task` and `task_hash`;
  * `truth.npz` / `truth.h5`: `case_ids`, `x_true (K, C, H, W)`, `u_true (K, C_u, H, W)` (a
    separate file, so an evaluation can be blind);
  * `reference.npz` / `reference.h5`: the **public** reference (`reference.heldout`):
    `case_ids`, `ref_samples (K, M_ref, C, H, W)`, `ref_weights (K, M_ref)` (each row sums to 1),
    for tuning, plots and a user's own checks; the held-out reference the scores use (same
    method and size, independent draws) is built beside it in the workdir and never exported;
  * `README.json`: shapes, dtypes, units, the physics' equation and sign convention, the grid
    and boundary convention, the operator, the noise, the normalization statistics, and how to
    hand samples back (`readers`).

The cases are the sweep's own (`Plan.cases`, or the study's `cases_files`); samples scored
with `score.evaluate` are compared with the same cases and held-out reference as the sweep's
samplers. `.h5` needs h5py (the `exchange` extra): without it `export` is an error naming the
extra, unless `h5=False` asks for the `.npz` files only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from posteriorjax import files
from posteriorjax.grids import Grid
from posteriorjax.reference import heldout
from posteriorjax.sweep import migrate
from posteriorjax.sweep import store as record_store
from posteriorjax.sweep.plan import Plan
from posteriorjax.sweep.settings import settings
from posteriorjax.tasks.base import Task

FORMAT = "posteriorjax.exchange.v1"


def _operator_description(task: Task) -> dict:
    """The observation operator of `task` as plain JSON (type, count, and its defining data)."""
    obs = task.observation
    out = {
        "type": type(obs).__name__,
        "values_per_field": int(obs.count),
        "num_observations": int(task.num_observations),
        "field_shape": list(obs.shape),
    }
    for name in ("name", "params", "realized"):
        if hasattr(obs, name):
            out[name] = json.loads(json.dumps(getattr(obs, name), default=str))
    if hasattr(obs, "factor"):
        out["factor"] = int(obs.factor)
        out["order"] = "block means of factor x factor blocks, blocks row-major"
    if hasattr(obs, "columns"):
        out["columns"] = np.asarray(obs.columns).tolist()
        out["order"] = "well-major: every row of the first column, then the next"
    if hasattr(obs, "indices"):
        out["order"] = "point values in row-major order of the cells (sensor_index rows)"
    leading = int(task.state_shape[0]) if len(task.state_shape) == 3 else 1
    out["state_channels_observed"] = leading
    out["layout"] = "y = concat over state channels (C-order) of the per-field values"
    return out


def sensors(task: Task) -> dict[str, np.ndarray]:
    """`sensor_index (P, 2)` [row, col] and, on a `Grid`, `sensor_position (P, 2)` [y, x] (domain units)."""
    obs = task.observation
    out = {"observation_mask": np.asarray(obs.mask)}
    if hasattr(obs, "indices"):
        w = obs.shape[1]
        flat = np.asarray(obs.indices)
        index = np.stack([flat // w, flat % w], axis=1).astype(np.int32)
        out["sensor_index"] = index
        if isinstance(task.grid, Grid):
            p = task.grid.points()
            out["sensor_position"] = np.stack([p[index[:, 0]], p[index[:, 1]]], axis=1)
    return out


def _grid(task: Task) -> dict:
    g = task.grid
    if not isinstance(g, Grid):
        return {"type": type(g).__name__, "description": (type(g).__doc__ or "").strip().splitlines()[0]}
    points = {
        "dirichlet": "interior nodes x_i = (i + 1) h, h = L / (n + 1); boundary values not stored",
        "periodic": "x_i = i h, h = L / n",
        "neumann": "cell centres x_i = (i + 1/2) h, h = L / n",
    }
    return {
        "n": g.n,
        "length": g.length,
        "boundary": g.bc,
        "spacing": g.spacing,
        "points": points[g.bc],
        "indexing": "fields are [channel, y, x]; row index = y, column index = x",
    }


def readme(task: Task, ids, ref_shape) -> dict:
    """The `README.json` of a task's export (see the module doc)."""
    k = len(ids)
    physics = (type(task.physics).__doc__ or "").strip()
    return {
        "format": FORMAT,
        "task": task.name,
        "task_config": task.config_dict(),
        "task_hash": task.config_hash(),
        "num_cases": k,
        "case_ids": list(ids),
        "files": {
            "cases": {
                "case_ids": [k],
                "y_obs": [k, task.num_observations],
                "noise_std": [],
                "field_mean": [],
                "field_std": [],
                "observation_mask": list(task.observation.mask.shape),
                "sensor_index": "[P, 2] int [row, col] (point sensors only)",
                "sensor_position": "[P, 2] float [y, x] in domain units (point sensors only)",
            },
            "truth": {"x_true": [k, *task.unknown_shape], "u_true": [k, *task.state_shape]},
            "reference": {"ref_samples": list(ref_shape), "ref_weights": list(ref_shape[:2])},
        },
        "reference_set": "public: for tuning, plots and your own checks. Scores use a held-out "
        "reference of the same method and size (independent draws), never exported; a score much "
        "better on this set than on the held-out one is flagged (held-out / public above "
        f"{heldout.GAP_THRESHOLD}, or above the spread between the held-out set's halves if larger)",
        "dtype": "float32 (case_ids: strings)",
        "unknown": {
            "shape": list(task.unknown_shape),
            "channels": [{"name": c.name, "unit": c.unit} for c in task.channels],
        },
        "physics": {
            "model": type(task.physics).__name__,
            "equation": physics,
            "sign": "as stated in the equation; e.g. Poisson tasks solve -lap(phi) = f, while "
            "the DiffusionPDE/PosteriorBench data solve lap(phi) = f (their phi = -ours)",
        },
        "grid": _grid(task),
        "observation": _operator_description(task),
        "noise": {
            "type": "Gaussian, independent",
            "std": np.asarray(task.noise_std).tolist(),
            "model": "y = observation(physics(x)) + std * N(0, I)",
        },
        "normalization": {
            "field_mean": np.asarray(task.field_stats[0]).tolist(),
            "field_std": np.asarray(task.field_stats[1]).tolist(),
            "note": "prior mean/std of the evaluated field: the sweep's SWD z-score; "
            "samples are handed back in physical (unnormalized) units",
        },
        "evaluation": task.evaluation_name,
        "samples": {
            "shape": ["N", *task.unknown_shape],
            "formats": ".npz/.h5: one array per case id, or samples [K, N, C, H, W] + case_ids [K]; "
            ".npy: [K, N, C, H, W] in case_ids order; .pt (torch): tensor or {case_id: tensor}; "
            "PosteriorBench: <dir>/<case_id>/generated.h5 (one field dataset + optional weights w); "
            "weights in .npz/.h5: weights [K, N] beside samples, or w:<case_id> [N]",
            "command": (
                f"python -m experiments.evaluate --workdir=DIR --task={task.name} --samples=PATH --name=LABEL"
            ),
        },
        "interop": "posteriorjax.exchange.interop.Forward(task): forward map and VJP on NumPy arrays",
    }


def write(directory, task: Task, ids, cases, *, ref_samples, ref_weights, h5: bool = True) -> dict:
    """Write one task's export files (module doc) to `directory` atomically; returns {name: path}.

    `h5=False`: the `.npz` files only; `h5=True` needs h5py (ModuleNotFoundError naming the extra).
    """
    directory = Path(directory)
    if h5:
        files.h5py_module("writing the .h5 export files (or pass h5=False / --h5=False for .npz only)")
    directory.mkdir(parents=True, exist_ok=True)
    ids = np.asarray([str(i) for i in ids])
    mean, std = (np.asarray(v, np.float32) for v in task.field_stats)
    contents = {
        "cases": {
            "case_ids": ids,
            "task": np.asarray(task.name),
            "task_hash": np.asarray(task.config_hash()),
            "y_obs": np.asarray(cases.y_obs, np.float32),
            "noise_std": np.asarray(task.noise_std, np.float32),
            "field_mean": mean,
            "field_std": std,
            **sensors(task),
        },
        "truth": {
            "case_ids": ids,
            "x_true": np.asarray(cases.x_true, np.float32),
            "u_true": np.asarray(cases.u_true, np.float32),
        },
        "reference": {
            "case_ids": ids,
            "ref_samples": np.asarray(ref_samples, np.float32),
            "ref_weights": np.asarray(ref_weights, np.float32),
        },
    }
    out = {}
    for name, arrays in contents.items():
        files.write_arrays(directory / f"{name}.npz", arrays)
        out[name] = directory / f"{name}.npz"
        if h5:
            files.atomic_write_bytes(directory / f"{name}.h5", files.encode_h5(arrays))
    files.atomic_write_json(directory / "README.json", readme(task, ids.tolist(), np.shape(ref_samples)))
    out["readme"] = directory / "README.json"
    return out


def export(config, workdir, *, progress: bool = False, h5: bool = True) -> dict[str, Path]:
    """Export every task of a sweep `config` to `workdir/exchange/<task>/`; returns {task: directory}.

    Writes the public reference and builds the held-out one (`Plan.reference`, cached in the
    workdir, never exported). `h5`: also write the `.h5` files (needs h5py; see `write`).

    `workdir` is prepared as the sweep prepares it (`store.prepare_workdir`: the same config
    resumes, another is refused), so a sweep, an export and `score.evaluate` share one workdir,
    one reference cache and one `results.jsonl`.
    """
    migrate.check(workdir)
    s = settings(config)
    plan = Plan.build(s)
    workdir = Path(workdir)
    record_store.prepare_workdir(workdir, config)
    out, path = {}, workdir / "references.json"
    reports = json.loads(path.read_text()) if path.exists() else {}
    for name in s.tasks:
        *_, reports[name] = plan.reference(name, workdir, lead=True, progress=progress)  # held-out
        ref_samples, ref_weights, _ = plan.reference(
            name, workdir, lead=True, progress=progress, which="public"
        )
        directory = workdir / "exchange" / name
        write(
            directory,
            plan.tasks[name],
            plan.case_ids(name),
            plan.cases(name),
            ref_samples=ref_samples,
            ref_weights=ref_weights,
            h5=h5,
        )
        out[name] = directory
    files.atomic_write_json(path, reports)  # the tables' reference column, as the sweep's
    return out
