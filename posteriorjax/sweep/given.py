"""Given cases: benchmark cases (and their reference posterior) read from a file, not drawn from a seed.

`load(path, task)` reads an export directory's `cases` file (`exchange.export.write`, `.npz` or `.h5`,
with `truth` and `reference` beside it) or a PosteriorBench `PosteriorDataset_hf` DatasetDict
directory (`load_posteriorbench`) and returns `GivenCases`: the case ids, the task with its
observation operator rebuilt at the given sensors (`with_sensors`), `Cases` and the reference.

**PosteriorBench rows** (`load_posteriorbench`; needs the optional `datasets` extra):
A row (`datasets.load_from_disk(dir)`, a DatasetDict with `validation` and `test` splits) holds
`a_ref` (`[1, H, W]` or `[H, W]`, the unknown), `u_ref` (the state), `metadata.sensor_coords`
(`[P, 2]` integer `[row, col]`), `posterior_samples_a` (`[M, 1, H, W]` or `[M, H, W]`) and
`posterior_weights` (`[M]`). Case ids are `<prefix>_<n>`, n = 1, 2, ... over the validation split,
then the test split, then any other split (PosteriorBench's `_discover_hf`).

Conventions converted:
  * storage scaling: with `scaled=True` the rows hold `0.5 (v - mean) / std` (PosteriorBench's
    `ModelNormalizer` scale 0.5; the Darcy rows store `a` as +-0.5): `v = stored std / 0.5 + mean`
    with the training-set statistics `STATS` (`training_source._default_hf_metadata`);
    `scaled=False` takes rows in physical units as they are;
  * the Poisson sign: the DiffusionPDE generator behind the data solves lap(phi) = f, our task
    -lap(phi) = f, so with `poisson_sign="lap"` (default) phi is negated (f is not); "neg_lap"
    keeps it. PosteriorBench's own solver is not released, so this default is the generator's
    documented convention, not one checked on the released data;
  * sensor order: `sensor_coords` rows are `[row, col]` = `[y, x]` in our `[y, x]` indexing, in
    the row's own order; our operator observes them in row-major order, so y is permuted.
The observation is the noise-free state at the sensors (PosteriorBench's o_gt = H(u_ref));
the noise std is the task's. Not converted: PosteriorBench's Dirichlet grids include the
boundary nodes (h = 1/(N - 1)); our Dirichlet tasks store interior nodes (h = 1/(N + 1)), so a
row of N points is read as our N-point grid, whose physics then differs by that spacing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from posteriorjax import files
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
            self,
            ids=self.ids[:num],
            cases=Cases(*(a[:num] for a in self.cases)),
            ref_samples=self.ref_samples[:num],
            ref_weights=self.ref_weights[:num],
        )


def _sensor_order(coords, shape: tuple[int, int], where: str = "sensor_coords") -> np.ndarray:
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
    _sensor_order(c, shape, where)
    mask = np.zeros(shape, bool)
    mask[c[:, 0], c[:, 1]] = True
    obs = MaskObservation(mask, name="given", realized=(("num_sensors", int(mask.sum())),))
    return eqx.tree_at(lambda t: t.observation, task, obs)


def reorder_observations(y, coords, shape: tuple[int, int], channels: int = 1) -> np.ndarray:
    """`y (..., channels * P)` in `coords`' order -> the row-major order of `with_sensors`' operator."""
    y = np.asarray(y)
    perm = _sensor_order(coords, shape)
    lead = y.shape[:-1]
    return y.reshape(*lead, channels, len(perm))[..., perm].reshape(*lead, -1)


def _is_posteriorbench(path) -> bool:
    """Whether `path` is a `datasets` DatasetDict directory (`dataset_dict.json`)."""
    return (Path(path) / "dataset_dict.json").is_file()


def load(path, task: Task, **options) -> GivenCases:
    """Given cases of `task` from an export `cases` file or a PosteriorBench DatasetDict directory.

    `options` go to `load_posteriorbench` (PosteriorBench rows only; an error for an export file).
    """
    path = Path(path)
    if _is_posteriorbench(path):
        return load_posteriorbench(path, task, **options)
    if options:
        raise ValueError(
            f"cases_file: options {sorted(options)} apply to PosteriorBench datasets, not {path}"
        )
    if path.suffix not in SUFFIXES or not path.is_file():
        raise ValueError(
            f"cases_file: expected an exported cases{SUFFIXES[0]} / cases{SUFFIXES[1]} file or a "
            f"PosteriorBench DatasetDict directory, got {path}"
        )
    arrays = {name: files.read_array_file(path.with_name(name + path.suffix)) for name in FILES}
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
        ids,
        task,
        Cases(x_true, np.asarray(truth["u_true"], np.float32), y_obs),
        np.asarray(ref["ref_samples"], np.float32),
        _weights(ref["ref_weights"], f"{path}: ref_weights"),
        str(path),
    )


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


# ----------------------------------------------------------------------------
# PosteriorBench rows

# (mean, std) of the training set per field, PosteriorBench `training_source._default_hf_metadata`
STATS = {
    "darcy": {"a": (7.5, 4.5), "u": (0.005692, 0.003790)},
    "poisson": {"a": (-5.1e-12, 0.27190), "u": (6.66e-6, 0.0038558)},
}
SPLIT_ORDER = ("validation", "test")
POISSON_SIGNS = ("lap", "neg_lap")
SCALE = 0.5


def dataset_of(task: Task) -> str:
    """PosteriorBench's dataset name of our task (`poisson*` -> poisson, `darcy*` -> darcy)."""
    for name in STATS:
        if task.name.startswith(name):
            return name
    raise ValueError(f"task: PosteriorBench rows are read for poisson and darcy tasks, got {task.name!r}")


def _datasets():
    try:
        import datasets
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "PosteriorBench datasets need the 'datasets' package: pip install 'posteriorjax[posteriorbench]'"
        ) from e
    return datasets


def _field(value, name: str, case_id: str, shape) -> np.ndarray:
    a = np.asarray(value, np.float64)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.shape != tuple(shape[-2:]):
        raise ValueError(
            f"{case_id}: {name}: expected [H, W] = {list(shape[-2:])} (or [1, H, W]), got {list(a.shape)}"
        )
    return a


def load_posteriorbench(path, task: Task, *, scaled: bool = True, poisson_sign: str = "lap") -> GivenCases:
    """The cases of a PosteriorBench DatasetDict directory for `task` (conventions: module doc)."""
    if poisson_sign not in POISSON_SIGNS:
        raise ValueError(f"poisson_sign: expected one of {POISSON_SIGNS}, got {poisson_sign!r}")
    name = dataset_of(task)
    dd = _datasets().load_from_disk(str(path)).with_format("numpy")
    splits = [s for s in SPLIT_ORDER if s in dd] + [s for s in dd if s not in SPLIT_ORDER]
    (ma, sa), (mu, su) = STATS[name]["a"], STATS[name]["u"]
    a_map = (lambda v: v * sa / SCALE + ma) if scaled else (lambda v: v)
    sign = -1.0 if name == "poisson" and poisson_sign == "lap" else 1.0
    u_map = (lambda v: sign * (v * su / SCALE + mu)) if scaled else (lambda v: sign * v)
    shape = task.unknown_shape
    ids, xs, us, coords, refs, weights = [], [], [], None, [], []
    for split in splits:
        for i in range(len(dd[split])):
            row = dd[split][i]
            case_id = f"{name}_{len(ids) + 1}"
            xs.append(a_map(_field(row["a_ref"], "a_ref", case_id, shape))[None])
            us.append(u_map(_field(row["u_ref"], "u_ref", case_id, shape))[None])
            c = np.asarray((row.get("metadata") or {}).get("sensor_coords"))
            if c.ndim != 2 or c.shape[1] != 2:
                raise ValueError(
                    f"{case_id}: metadata.sensor_coords: expected [P, 2] [row, col], got {list(c.shape)}"
                )
            c = c.astype(np.int64)
            if coords is not None and not np.array_equal(c, coords):
                raise ValueError(
                    f"{case_id}: metadata.sensor_coords differ from {ids[0]}'s; one task has one operator"
                )
            coords = c
            s = np.asarray(row["posterior_samples_a"], np.float64)
            s = s[:, 0] if s.ndim == 4 and s.shape[1] == 1 else s
            if s.ndim != 3 or s.shape[1:] != shape[1:]:
                raise ValueError(
                    f"{case_id}: posterior_samples_a: expected [M, H, W] with [H, W] = {list(shape[1:])}, "
                    f"got {list(s.shape)}"
                )
            w = np.asarray(row["posterior_weights"], np.float64)
            if w.shape != (len(s),) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise ValueError(
                    f"{case_id}: posterior_weights: expected {len(s)} finite weights >= 0, positive sum"
                )
            refs.append(a_map(s)[:, None])
            weights.append(w / w.sum())
            ids.append(case_id)
    if not ids:
        raise ValueError(f"{path}: no rows in splits {splits}")
    sizes = {len(w) for w in weights}
    if len(sizes) != 1:
        raise ValueError(
            f"{path}: every case needs the same number of reference samples, got {sorted(sizes)}"
        )
    given = with_sensors(task, coords, f"{path}: metadata.sensor_coords")
    u = np.stack(us).astype(np.float32)
    y = u[:, :, coords[:, 0], coords[:, 1]].reshape(len(ids), -1)
    y = reorder_observations(y, coords, shape[1:], channels=u.shape[1])
    return GivenCases(
        tuple(ids),
        given,
        Cases(np.stack(xs).astype(np.float32), u, y.astype(np.float32)),
        np.stack(refs).astype(np.float32),
        np.stack(weights).astype(np.float32),
        str(path),
    )
