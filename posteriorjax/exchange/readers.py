"""Readers: arrays and sampler output from framework-neutral files, validated, never unpickled.

`files.read_array_file(path)` reads an `.npz` or `.h5` file of named arrays (an object array,
which only pickle can hold, is an error). `read_ensemble(path, ids, shape)` reads
the samples of every case as `(K, N, C, H, W)` float32 in the order of `ids`, with their member
weights when the file has any (`Ensemble`), from

  * `.npz` / `.h5`: one array per case id (`(N, C, H, W)`, or `(N, H, W)` when C = 1) with
    optional weights `w:<case_id> (N,)`, or `samples (K, N, C, H, W)` with `case_ids (K,)` and
    optional `weights (K, N)`; an optional `task` entry (`.h5`: attribute) must name the task
    (`.h5` needs h5py: the `exchange` extra);
  * `.npy`: one `(K, N, C, H, W)` array, cases in the export's order (no weights);
  * `.pt` (needs PyTorch; `torch.load(weights_only=True)`): a tensor as `.npy`, or a dict
    `{case_id: tensor}` (weights `w:<case_id>`), or `{"samples", "case_ids"[, "weights"]}`;
  * a directory in PosteriorBench's layout, `<dir>/<case_id>/generated.h5`, one dataset per
    field plus optional `w (N,)` (needs h5py).

Weights are normalized as PosteriorBench's evaluator normalizes them (`normalize_weights`:
one value per member, finite, >= 0, positive sum, divided by the sum); negative, all-zero or
non-finite weights are an error naming the case. Samples must be floating point: integer or
boolean arrays (a sampler's output cast by mistake, a mask) are refused with their dtype;
float64 (or float16) is accepted, converted to float32 as the sweep scores, and its dtype is
returned (`Ensemble.dtype`) so the records state it.

Every case id must appear exactly once, and nothing else; every case has the same N. Errors
name the case, the array, what was expected and what was given. Non-finite values are not an
error: the records count them (`num_invalid`) and their metrics are NaN, never averaged in.
A reader whose package is missing (h5py, torch) is an error naming what to install, never a skip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from posteriorjax import files

GENERATED = "generated.h5"
WEIGHT_PREFIX = "w:"  # per-case weights of a keyed file: `w:<case_id>`
# weights equal to 1/N to this relative tolerance are uniform (an unweighted ensemble)
UNIFORM_RTOL = 1e-6


@dataclasses.dataclass(frozen=True)
class Ensemble:
    """Samples read from a file. `samples (K, N, C, H, W)` float32; `weights (K, N)` float64,
    each row summing to 1, or None when every case is uniformly weighted; `dtype`: the file's
    sample dtype (before conversion to float32); `reader`: the format read (`READERS`)."""

    samples: np.ndarray
    weights: np.ndarray | None
    dtype: str
    reader: str

    def ess(self) -> np.ndarray:
        """Kish effective sample size per case `(K,)`: 1 / sum_i w_i^2 (N for uniform weights)."""
        if self.weights is None:
            return np.full(self.samples.shape[0], float(self.samples.shape[1]))
        return 1.0 / np.sum(self.weights**2, axis=1)


def normalize_weights(weights, num: int, where: str) -> np.ndarray:
    """`weights (num,)` divided by their sum, float64, as PosteriorBench's `normalize_weights`.

    ValueError naming `where` unless the weights are one finite value >= 0 per member with a
    positive sum.
    """
    w = np.asarray(weights)
    if w.dtype.kind not in "fiu" or w.shape != (num,):
        raise ValueError(f"{where}: expected {num} real weights (one per member), got {w.dtype} {w.shape}")
    w = w.astype(np.float64)
    if not np.all(np.isfinite(w)):
        raise ValueError(f"{where}: expected finite weights, got {int(np.sum(~np.isfinite(w)))} non-finite")
    if np.any(w < 0):
        raise ValueError(
            f"{where}: expected weights >= 0, got {int(np.sum(w < 0))} negative (min {w.min():g})"
        )
    total = float(w.sum())
    if not total > 0:
        raise ValueError(f"{where}: expected weights with a positive sum, got all zero")
    return w / total


def read_samples(path, ids: Sequence[str], shape: tuple[int, ...], *, task: str | None = None) -> np.ndarray:
    """Samples `(K, N, C, H, W)` float32 of the cases `ids`, in their order (module doc for the formats).

    A file with non-uniform weights is a ValueError here (they would be dropped): read it with
    `read_ensemble`.
    """
    ensemble = read_ensemble(path, ids, shape, task=task)
    if ensemble.weights is not None:
        raise ValueError(f"{path}: holds weighted members; read_ensemble returns them with their weights")
    return ensemble.samples


def read_ensemble(path, ids: Sequence[str], shape: tuple[int, ...], *, task: str | None = None) -> Ensemble:
    """Samples `(K, N, C, H, W)` float32 of the cases `ids` with their normalized weights (`Ensemble`)."""
    path, ids = Path(path), [str(i) for i in ids]
    if path.is_dir():
        per_case, weights, reader = *_posteriorbench_tree(path), "posteriorbench"
    elif path.suffix in (".npz", ".h5"):
        per_case, weights = _keyed(files.read_array_file(path), path, ids, task)
        reader = path.suffix[1:]
    elif path.suffix == ".npy":
        try:
            per_case, weights, reader = (
                _stacked(np.load(path, allow_pickle=False), None, ids, path),
                {},
                "npy",
            )
        except ValueError as e:
            if "pickle" not in str(e):
                raise
            raise ValueError(f"{path}: holds an object (pickled) array; save a numeric array ({e})") from e
    elif path.suffix == ".pt":
        per_case, weights, reader = *_torch(path, ids), "pt"
    elif not path.exists():
        raise FileNotFoundError(f"samples: no file or directory {path}")
    else:
        raise ValueError(f"samples: expected .npz, .npy, .h5, .pt or a PosteriorBench directory, got {path}")
    unknown = sorted((set(per_case) | set(weights)) - set(ids))
    if unknown:
        raise ValueError(
            f"{path}: case id(s) {unknown[:5]} are not cases of this task (expected {ids[:3]}...)"
        )
    missing = [i for i in ids if i not in per_case]
    if missing:
        raise ValueError(f"{path}: no samples for case(s) {missing[:5]} (of {len(ids)})")
    dtypes = sorted({str(np.asarray(per_case[i]).dtype) for i in ids})
    out = [_member_array(per_case[i], i, shape, path) for i in ids]
    sizes = {a.shape[0] for a in out}
    if len(sizes) != 1:
        raise ValueError(f"{path}: every case needs the same number of samples, got {sorted(sizes)}")
    n = sizes.pop()
    w = np.full((len(ids), n), 1.0 / n)
    for k, i in enumerate(ids):
        if i in weights:
            w[k] = normalize_weights(weights[i], n, f"{path}: weights of case {i!r}")
    uniform = np.allclose(w, 1.0 / n, rtol=UNIFORM_RTOL, atol=0)
    return Ensemble(np.stack(out), None if uniform else w, "/".join(dtypes), reader)


def _member_array(a, case_id: str, shape, path) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind in "iub":
        raise ValueError(
            f"{path}: samples of case {case_id!r}: expected floating-point fields, got dtype {a.dtype} "
            "(integer or boolean samples are refused: cast the sampler's fields to float32 or float64)"
        )
    if a.dtype.kind != "f":
        raise ValueError(f"{path}: samples of case {case_id!r}: expected a real array, got dtype {a.dtype}")
    if shape[0] == 1 and a.ndim == len(shape):
        a = a[:, None]
    if a.ndim != len(shape) + 1 or tuple(a.shape[1:]) != tuple(shape) or a.shape[0] < 1:
        raise ValueError(
            f"{path}: samples of case {case_id!r}: expected shape (N, {', '.join(map(str, shape))}), "
            f"got {a.shape} (another task or resolution?)"
        )
    return a.astype(np.float32)


def _check_ids(case_ids, path) -> list[str]:
    ids = [str(i) for i in np.asarray(case_ids).reshape(-1)]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"{path}: case_ids: case(s) {sorted(set(dup))[:5]} appear more than once")
    return ids


def _stacked(samples, case_ids, ids, path) -> dict:
    samples = np.asarray(samples)
    order = ids if case_ids is None else _check_ids(case_ids, path)
    if samples.ndim < 1 or samples.shape[0] != len(order):
        raise ValueError(
            f"{path}: samples: expected a leading axis of {len(order)} cases, got shape {samples.shape}"
        )
    return dict(zip(order, samples, strict=True))


def _keyed(arrays: dict, path, ids, task) -> tuple[dict, dict]:
    """({case id: samples}, {case id: weights}) of a keyed `.npz` / `.h5` (or `.pt` dict)."""
    if "task" in arrays and task is not None and str(arrays["task"]) != task:
        raise ValueError(f"{path}: holds samples of task {str(arrays['task'])!r}, not {task!r}")
    # scalars (an .h5 file's attributes, a stored label) are metadata, not a case's samples
    arrays = {k: v for k, v in arrays.items() if k != "task" and np.ndim(v) > 0}
    if "samples" in arrays:
        if "case_ids" not in arrays:
            raise ValueError(f"{path}: samples given without case_ids (K,) naming their cases")
        per_case = _stacked(arrays["samples"], arrays["case_ids"], ids, path)
        if "weights" not in arrays:
            return per_case, {}
        w = np.asarray(arrays["weights"])
        if w.ndim != 2 or w.shape[0] != len(per_case):
            raise ValueError(f"{path}: weights: expected shape (K={len(per_case)}, N), got {w.shape}")
        return per_case, dict(zip(per_case, w, strict=True))
    weights = {k[len(WEIGHT_PREFIX) :]: v for k, v in arrays.items() if k.startswith(WEIGHT_PREFIX)}
    return {k: v for k, v in arrays.items() if not k.startswith(WEIGHT_PREFIX)}, weights


def _posteriorbench_tree(root: Path) -> tuple[dict, dict]:
    h5py = files.h5py_module(f"reading PosteriorBench predictions ({root}/<case_id>/{GENERATED})")
    out, weights = {}, {}
    for path in sorted(root.glob(f"*/{GENERATED}")):
        case_id = path.parent.name
        with h5py.File(path, "r") as f:
            fields = [k for k in f.keys() if k != "w"]
            name = f.attrs.get("target_field")
            name = name.decode() if isinstance(name, bytes) else name
            if name is None:
                if len(fields) != 1:
                    raise ValueError(f"{path}: expected one field dataset besides 'w', got {fields}")
                name = fields[0]
            if name not in f:
                raise ValueError(f"{path}: target field {name!r} not found; datasets {list(f.keys())}")
            samples = f[name][()]
            if "w" in f:
                weights[case_id] = normalize_weights(f["w"][()], len(samples), f"{path}: w")
            stored = f.attrs.get("case_id")
            stored = stored.decode() if isinstance(stored, bytes) else stored
            if stored is not None and str(stored) != case_id:
                raise ValueError(
                    f"{path}: attribute case_id {stored!r} differs from its directory {case_id!r}"
                )
        out[case_id] = samples
    if not out:
        raise ValueError(f"{root}: expected PosteriorBench predictions <case_id>/{GENERATED}, found none")
    return out, weights


def _torch(path: Path, ids) -> tuple[dict, dict]:
    try:
        import torch
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f"{path}: reading .pt files needs PyTorch: pip install torch (the CPU build suffices), "
            "or save the samples as .npz"
        ) from e
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch's UnpicklingError: the file needs full pickle
        raise ValueError(f"{path}: cannot be read with torch.load(weights_only=True): {e}") from e

    def arr(t):
        return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)

    if isinstance(obj, dict):
        arrays = {str(k): (v if k == "case_ids" else arr(v)) for k, v in obj.items()}
        if "case_ids" in arrays:
            arrays["case_ids"] = np.asarray([str(i) for i in arrays["case_ids"]])
        return _keyed(arrays, path, ids, None)
    return _stacked(arr(obj), None, ids, path), {}
