"""Readers: arrays and sampler output from framework-neutral files, validated, never unpickled.

`read_arrays(path)` reads an `.npz` or `.h5` file of named arrays (`np.load(allow_pickle=False)`:
an object array, which only pickle can hold, is an error). `read_samples(path, ids, shape)` reads
the samples of every case as `(K, N, C, H, W)` float32 in the order of `ids`, from

  * `.npz` / `.h5`: one array per case id (`(N, C, H, W)`, or `(N, H, W)` when C = 1), or
    `samples (K, N, C, H, W)` with `case_ids (K,)`; an optional `task` entry (`.h5`: attribute)
    must name the task;
  * `.npy`: one `(K, N, C, H, W)` array, cases in the export's order;
  * `.pt` (PyTorch, only when torch is installed; `torch.load(weights_only=True)`): a tensor as
    `.npy`, or a dict `{case_id: tensor}`, or `{"samples": tensor, "case_ids": [...]}`;
  * a directory in PosteriorBench's layout, `<dir>/<case_id>/generated.h5`, one dataset per
    field plus `w` (uniform weights; other weights are an error: our metrics score unweighted
    ensembles).

Every case id must appear exactly once, and nothing else; every case has the same N. Errors
name the case, the array, what was expected and what was given. Non-finite values are not an
error: the records count them (`num_invalid`) and their metrics are NaN, never averaged in.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

GENERATED = "generated.h5"


def _h5py():
    try:
        import h5py
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("reading .h5 files needs h5py: pip install 'posteriorjax[exchange]'") from e
    return h5py


def read_arrays(path) -> dict[str, np.ndarray]:
    """Every array of an `.npz` or `.h5` file by name (`.h5`: root datasets; attributes as 0-d arrays)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no file {path}")
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except ValueError as e:
            raise ValueError(
                f"{path}: holds an object (pickled) array; save numeric or string arrays ({e})"
            ) from e
    if path.suffix == ".h5":
        with _h5py().File(path, "r") as f:
            out = {k: np.asarray(f.attrs[k]) for k in f.attrs}
            out.update({k: f[k][()] for k in f.keys() if isinstance(f[k], _h5py().Dataset)})
        return {k: (v.astype(str) if v.dtype.kind in "SO" else v) for k, v in out.items()}
    raise ValueError(f"path: expected a .npz or .h5 file, got {path}")


def read_samples(path, ids: Sequence[str], shape: tuple[int, ...], *, task: str | None = None) -> np.ndarray:
    """Samples `(K, N, C, H, W)` float32 of the cases `ids`, in their order (module doc for the formats)."""
    path, ids = Path(path), [str(i) for i in ids]
    if path.is_dir():
        per_case = _posteriorbench_tree(path)
    elif path.suffix in (".npz", ".h5"):
        per_case = _keyed(read_arrays(path), path, ids, task)
    elif path.suffix == ".npy":
        try:
            per_case = _stacked(np.load(path, allow_pickle=False), None, ids, path)
        except ValueError as e:
            if "pickle" not in str(e):
                raise
            raise ValueError(f"{path}: holds an object (pickled) array; save a numeric array ({e})") from e
    elif path.suffix == ".pt":
        per_case = _torch(path, ids)
    elif not path.exists():
        raise FileNotFoundError(f"samples: no file or directory {path}")
    else:
        raise ValueError(f"samples: expected .npz, .npy, .h5, .pt or a PosteriorBench directory, got {path}")
    unknown = sorted(set(per_case) - set(ids))
    if unknown:
        raise ValueError(
            f"{path}: case id(s) {unknown[:5]} are not cases of this task (expected {ids[:3]}...)"
        )
    missing = [i for i in ids if i not in per_case]
    if missing:
        raise ValueError(f"{path}: no samples for case(s) {missing[:5]} (of {len(ids)})")
    out = [_member_array(per_case[i], i, shape, path) for i in ids]
    sizes = {a.shape[0] for a in out}
    if len(sizes) != 1:
        raise ValueError(f"{path}: every case needs the same number of samples, got {sorted(sizes)}")
    return np.stack(out)


def _member_array(a, case_id: str, shape, path) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "fiu":
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


def _keyed(arrays: dict, path, ids, task) -> dict:
    if "task" in arrays and task is not None and str(arrays["task"]) != task:
        raise ValueError(f"{path}: holds samples of task {str(arrays['task'])!r}, not {task!r}")
    # scalars (an .h5 file's attributes, a stored label) are metadata, not a case's samples
    arrays = {k: v for k, v in arrays.items() if k != "task" and np.ndim(v) > 0}
    if "samples" in arrays:
        if "case_ids" not in arrays:
            raise ValueError(f"{path}: samples given without case_ids (K,) naming their cases")
        return _stacked(arrays["samples"], arrays["case_ids"], ids, path)
    return arrays


def _posteriorbench_tree(root: Path) -> dict:
    h5py = _h5py()
    out = {}
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
                w = np.asarray(f["w"][()], np.float64)
                if w.shape != (len(samples),) or not np.allclose(w, w.mean(), rtol=1e-5, atol=0):
                    raise ValueError(f"{path}: w: expected uniform weights of shape ({len(samples)},)")
            stored = f.attrs.get("case_id")
            stored = stored.decode() if isinstance(stored, bytes) else stored
            if stored is not None and str(stored) != case_id:
                raise ValueError(
                    f"{path}: attribute case_id {stored!r} differs from its directory {case_id!r}"
                )
        out[case_id] = samples
    if not out:
        raise ValueError(f"{root}: expected PosteriorBench predictions <case_id>/{GENERATED}, found none")
    return out


def _torch(path: Path, ids) -> dict:
    try:
        import torch
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"{path}: reading .pt files needs PyTorch (not installed)") from e
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch's UnpicklingError: the file needs full pickle
        raise ValueError(f"{path}: cannot be read with torch.load(weights_only=True): {e}") from e

    def arr(t):
        return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)

    if isinstance(obj, dict):
        if "samples" in obj:
            if "case_ids" not in obj:
                raise ValueError(f"{path}: samples given without case_ids naming their cases")
            return _stacked(arr(obj["samples"]), np.asarray(list(obj["case_ids"])), ids, path)
        return {str(k): arr(v) for k, v in obj.items()}
    return _stacked(arr(obj), None, ids, path)
