"""PosteriorBench's `PosteriorDataset_hf` rows as given cases (needs the optional `datasets` extra).

A row (`datasets.load_from_disk(dir)`, a DatasetDict with `validation` and `test` splits) holds
`a_ref` (`[1, H, W]` or `[H, W]`, the unknown), `u_ref` (the state), `metadata.sensor_coords`
(`[P, 2]` integer `[row, col]`), `posterior_samples_a` (`[M, 1, H, W]` or `[M, H, W]`) and
`posterior_weights` (`[M]`). Case ids are `<prefix>_<n>`, n = 1, 2, ... over the validation split,
then the test split, then any other split (PosteriorBench's `_discover_hf`).

Conventions converted (`load`):
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

import numpy as np

from posteriorjax.exchange.cases import GivenCases, reorder_observations, with_sensors
from posteriorjax.tasks.base import Cases, Task

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


def load(path, task: Task, *, scaled: bool = True, poisson_sign: str = "lap") -> GivenCases:
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
        tuple(ids), given, Cases(np.stack(xs).astype(np.float32), u, y.astype(np.float32)),
        np.stack(refs).astype(np.float32), np.stack(weights).astype(np.float32), str(path),
    )  # fmt: skip
