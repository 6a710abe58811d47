"""Given cases: benchmark cases (and their reference posterior) read from a file, not drawn from a seed.

`load(path, task)` reads an export directory's `cases` file (`export.write`, `.npz` or `.h5`,
with `truth` and `reference` beside it) or a PosteriorBench `PosteriorDataset_hf` DatasetDict
directory (`posteriorbench.load`) and returns `GivenCases`: the case ids, the task with its
observation operator rebuilt at the given sensors (`with_sensors`), `Cases` and the reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from posteriorjax.observations import MaskObservation
from posteriorjax.tasks.base import Cases, Task

FILES = ("cases", "truth", "reference")
SUFFIXES = (".npz", ".h5")


@dataclasses.dataclass(frozen=True)
class GivenCases:
    """Cases from a file. `ids (K,)`; `cases`: `x_true (K, C, H, W)`, `u_true (K, C_u, H, W)`,
    `y_obs (K, M)` (in the task's observation order); `ref_samples (K, M_ref, C, H, W)`,
    `ref_weights (K, M_ref)` (sum to 1); `task`: the task observing the file's sensors."""

    ids: tuple[str, ...]
    task: Task
    cases: Cases
    ref_samples: np.ndarray
    ref_weights: np.ndarray
    source: str

    def head(self, num: int, where: str = "num_cases") -> GivenCases:
        """The first `num` cases (ValueError if the file holds fewer)."""
        if num > len(self.ids):
            raise ValueError(
                f"{where}: expected at most the {len(self.ids)} cases of {self.source}, got {num}"
            )
        return dataclasses.replace(
            self, ids=self.ids[:num], cases=Cases(*(a[:num] for a in self.cases)),
            ref_samples=self.ref_samples[:num], ref_weights=self.ref_weights[:num],
        )  # fmt: skip


def sensor_order(coords, shape: tuple[int, int], where: str = "sensor_coords") -> np.ndarray:
    """The permutation putting sensors `coords (P, 2)` (integer `[row, col]` = `[y, x]`) in the
    row-major order `MaskObservation` observes them in (ValueError on out-of-range or repeated ones)."""
    c = np.asarray(coords)
    if c.ndim != 2 or c.shape[1] != 2 or c.dtype.kind not in "iu":
        raise ValueError(f"{where}: expected integer (P, 2) [row, col] indices, got {c.dtype} {c.shape}")
    h, w = shape
    if np.any(c < 0) or np.any(c[:, 0] >= h) or np.any(c[:, 1] >= w):
        raise ValueError(
            f"{where}: expected rows in [0, {h}) and columns in [0, {w}), got {c.min(0)}..{c.max(0)}"
        )
    flat = c[:, 0] * w + c[:, 1]
    if len(np.unique(flat)) != len(flat):
        raise ValueError(
            f"{where}: expected distinct sensors, got {len(flat) - len(np.unique(flat))} repeated"
        )
    return np.argsort(flat, kind="stable")


def with_sensors(task: Task, coords, where: str = "sensor_coords") -> Task:
    """`task` observing its state at the point sensors `coords (P, 2)` (`[row, col]`), any order.

    The observation becomes a `MaskObservation` (values in row-major order of the cells); the
    prior, physics and noise are the task's. Observations given in `coords`' order are put in
    that order with `reorder_observations`.
    """
    shape = tuple(task.state_shape[-2:])
    c = np.asarray(coords)
    sensor_order(c, shape, where)
    mask = np.zeros(shape, bool)
    mask[c[:, 0], c[:, 1]] = True
    obs = MaskObservation(mask, name="given", realized=(("num_sensors", int(mask.sum())),))
    return eqx.tree_at(lambda t: t.observation, task, obs)


def reorder_observations(y, coords, shape: tuple[int, int], channels: int = 1) -> np.ndarray:
    """`y (..., channels * P)` in `coords`' order -> the row-major order of `with_sensors`' operator."""
    y = np.asarray(y)
    perm = sensor_order(coords, shape)
    lead = y.shape[:-1]
    return y.reshape(*lead, channels, len(perm))[..., perm].reshape(*lead, -1)


def is_posteriorbench(path) -> bool:
    """Whether `path` is a `datasets` DatasetDict directory (`dataset_dict.json`)."""
    return (Path(path) / "dataset_dict.json").is_file()


def load(path, task: Task, **options) -> GivenCases:
    """Given cases of `task` from an export `cases` file or a PosteriorBench DatasetDict directory.

    `options` go to `posteriorbench.load` (PosteriorBench rows only; an error for an export file).
    """
    from posteriorjax.exchange import posteriorbench, readers

    path = Path(path)
    if is_posteriorbench(path):
        return posteriorbench.load(path, task, **options)
    if options:
        raise ValueError(
            f"cases_file: options {sorted(options)} apply to PosteriorBench datasets, not {path}"
        )
    if path.suffix not in SUFFIXES or not path.is_file():
        raise ValueError(
            f"cases_file: expected an exported cases{SUFFIXES[0]} / cases{SUFFIXES[1]} file or a "
            f"PosteriorBench DatasetDict directory, got {path}"
        )
    arrays = {name: readers.read_arrays(path.with_name(name + path.suffix)) for name in FILES}
    cases, truth, ref = arrays["cases"], arrays["truth"], arrays["reference"]
    ids = tuple(str(i) for i in cases["case_ids"])
    for name in ("truth", "reference"):
        other = tuple(str(i) for i in arrays[name]["case_ids"])
        if other != ids:
            raise ValueError(
                f"cases_file: {name}{path.suffix} holds cases {other[:3]}..., {path.name} {ids[:3]}..."
            )
    task_name = str(cases.get("task", task.name))
    if task_name != task.name:
        raise ValueError(f"cases_file: {path} holds cases of task {task_name!r}, not {task.name!r}")
    if "sensor_index" in cases:
        task = with_sensors(task, cases["sensor_index"], f"{path}: sensor_index")
    x_true = np.asarray(truth["x_true"], np.float32)
    if x_true.shape[1:] != task.unknown_shape:
        raise ValueError(
            f"cases_file: {path} holds unknowns of shape {x_true.shape[1:]}; task {task.name!r} has "
            f"{task.unknown_shape} (another resolution?)"
        )
    y_obs = np.asarray(cases["y_obs"], np.float32)
    task.check_observation(jnp.zeros(y_obs.shape[1:]), f"{path}: y_obs (one case)")
    return GivenCases(
        ids, task, Cases(x_true, np.asarray(truth["u_true"], np.float32), y_obs),
        np.asarray(ref["ref_samples"], np.float32), _weights(ref["ref_weights"], f"{path}: ref_weights"),
        str(path),
    )  # fmt: skip


def _weights(w, where: str) -> np.ndarray:
    w = np.asarray(w, np.float64)
    if w.ndim != 2 or not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(1) <= 0):
        raise ValueError(f"{where}: expected finite non-negative (K, M) weights with positive sums")
    return (w / w.sum(1, keepdims=True)).astype(np.float32)


def entry(value) -> tuple[str, dict]:
    """A `config.cases_files` value: a path, or `{"path": ..., **posteriorbench options}`."""
    if isinstance(value, Mapping):
        value = dict(value)
        if "path" not in value:
            raise ValueError(f"config.cases_files: expected a path or a dict with 'path', got {value!r}")
        return str(value.pop("path")), value
    return str(value), {}
