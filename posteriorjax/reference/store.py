"""On-disk storage of pools and references: `.npz` chunk files plus JSON manifests.

Every artifact lives in a directory with a ``manifest.json`` holding the task
configuration (`Task.config_dict()`), its hash (`Task.config_hash()`), the
method, seed and sizes, and a SHA-256 checksum per data file. Every file is
written atomically (to a temporary name in the same directory, flushed, then
`os.replace`d), so a process killed at any point leaves either the old file or
the new one, never a torn one: that is what makes pool builds resumable.
Loading an artifact under a different task configuration is a `ValueError`; a file that
fails verification (checksum, truncation) is a `CorruptFile`, which a rerun answers by
`quarantine`-ing the file (renamed aside with a warning) and rebuilding it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def atomic_write_bytes(path, data: bytes) -> None:
    """Write `data` to `path` atomically (temporary file in the same directory, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class CorruptFile(ValueError):
    """A stored file failed verification: `path` and `reason` (what failed)."""

    def __init__(self, path, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"path: {reason} for {path} (file corrupted or replaced)")


def quarantine(path, reason: str) -> Path:
    """Rename `path` (file or directory) aside to `<name>.corrupt-<n>` (first free n), with a warning.

    The file is kept for inspection, never deleted; the caller then rebuilds it. Returns the new path.
    """
    path = Path(path)
    n = 0
    while (aside := path.with_name(f"{path.name}.corrupt-{n}")).exists():
        n += 1
    os.replace(path, aside)
    warnings.warn(f"{path}: {reason}; set aside as {aside.name} and rebuilt", stacklevel=2)
    return aside


def atomic_write_json(path, obj) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_arrays(arrays: dict[str, np.ndarray]) -> bytes:
    """Uncompressed `.npz` bytes of named arrays."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def write_arrays(path, arrays: dict[str, np.ndarray]) -> str:
    """Write named arrays atomically as `.npz`; returns the file's SHA-256."""
    data = encode_arrays(arrays)
    atomic_write_bytes(path, data)
    return sha256(data)


def read_arrays(path, checksum: str | None = None) -> dict[str, np.ndarray]:
    """Read a `.npz` written by `write_arrays`, verifying its SHA-256 when given."""
    data = Path(path).read_bytes()
    if checksum is not None and sha256(data) != checksum:
        raise CorruptFile(path, "checksum mismatch")
    try:
        with np.load(io.BytesIO(data)) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:  # truncated or not an .npz
        raise CorruptFile(path, f"unreadable .npz ({type(e).__name__}: {e})") from e


def array_checksum(array) -> str:
    """SHA-256 of an array's C-order bytes (dtype and shape are checked separately by the reader)."""
    return sha256(np.ascontiguousarray(array).tobytes())


def read_fields(path, checksums: dict[str, str]) -> dict[str, np.ndarray]:
    """Read only the arrays named in `checksums` from a `.npz`, verifying each one's `array_checksum`.

    The other members are never read: a rejection scan needs the observations, not the fields.
    """
    out = {}
    try:
        z = np.load(path)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise CorruptFile(path, f"unreadable .npz ({type(e).__name__}: {e})") from e
    with z:
        for name, checksum in checksums.items():
            if name not in z.files:
                raise ValueError(f"fields: {path} has no array {name!r}; it has {z.files}")
            try:
                array = z[name]
            except zipfile.BadZipFile as e:  # the member's CRC-32 already failed
                raise CorruptFile(path, f"checksum mismatch for {name!r} ({e})") from e
            if array_checksum(array) != checksum:
                raise CorruptFile(path, f"checksum mismatch for {name!r}")
            out[name] = array
    return out


def read_manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise ValueError(f"directory: no {MANIFEST} in {directory}")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptFile(path, f"unreadable manifest ({e})") from e
    if not isinstance(manifest, dict):
        raise CorruptFile(path, "manifest is not a JSON object")
    return manifest


def check_task(manifest: dict, task, what: str = "artifact") -> None:
    """Raise ValueError unless the manifest was built for `task`'s exact configuration."""
    want, got = task.config_hash(), manifest.get("task_hash")
    if want != got:
        raise ValueError(
            f"task: this {what} was built for task config {manifest.get('task_config')} "
            f"(hash {got}); the given task has config {task.config_dict()} (hash {want})"
        )


@dataclasses.dataclass(frozen=True)
class Reference:
    """A weighted reference posterior ensemble for one case.

    Attributes:
      samples: `(K, C, H, W)` members.
      weights: `(K,)`, >= 0, summing to 1.
      method: how it was built (``"eps_rule"``, ``"importance"``, ``"exact"``, ``"pcn"``...).
      seed: the seed of its randomness.
      info: method-specific numbers (acceptance rate, pool size, ESS, ...), JSON-serializable.
    """

    samples: np.ndarray
    weights: np.ndarray
    method: str
    seed: int
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        s, w = np.asarray(self.samples), np.asarray(self.weights)
        if s.ndim < 2 or w.shape != (s.shape[0],):
            raise ValueError(
                f"weights: expected shape ({s.shape[0]},) matching samples {s.shape}, got {w.shape}"
            )
        if not (np.all(np.isfinite(w)) and np.all(w >= 0) and abs(float(w.sum()) - 1.0) < 1e-4):
            raise ValueError(f"weights: expected finite values >= 0 summing to 1, got sum {float(w.sum())}")

    @property
    def size(self) -> int:
        return int(np.asarray(self.samples).shape[0])

    def ess(self) -> float:
        """Kish effective sample size 1 / sum w^2."""
        return float(1.0 / np.sum(np.asarray(self.weights, np.float64) ** 2))


def save_reference(directory, reference: Reference, task) -> None:
    """Write `reference` to `directory` (data file + manifest with task config, hash, checksum)."""
    directory = Path(directory)
    checksum = write_arrays(
        directory / "reference.npz", {"samples": reference.samples, "weights": reference.weights}
    )
    atomic_write_json(
        directory / MANIFEST,
        {
            "kind": "reference",
            "format": FORMAT_VERSION,
            "task_config": task.config_dict(),
            "task_hash": task.config_hash(),
            "method": reference.method,
            "seed": int(reference.seed),
            "size": reference.size,
            "shape": list(np.shape(reference.samples)),
            "info": reference.info,
            "checksums": {"reference.npz": checksum},
        },
    )


def load_reference(directory, task) -> Reference:
    """Load a reference saved by `save_reference`; ValueError if built for another task config."""
    manifest = read_manifest(directory)
    if manifest.get("kind") != "reference":
        raise ValueError(f"directory: {directory} holds a {manifest.get('kind')!r}, expected a reference")
    check_task(manifest, task, "reference")
    arrays = read_arrays(Path(directory) / "reference.npz", manifest["checksums"]["reference.npz"])
    return Reference(
        arrays["samples"], arrays["weights"], manifest["method"], manifest["seed"], manifest["info"]
    )


def save_references(
    directory, arrays: dict[str, np.ndarray], task, *, method: str, settings: str, info
) -> None:
    """Write the references of every case of a study to `directory` (the `save_reference` layout).

    `arrays` holds `ref_samples (K, M, C, H, W)`, `ref_weights (K, M)` and the cases they were
    built for (`x_true`, `y_obs`); `settings` is the JSON string of what built them (checked by
    `load_references`), `info` the per-case method numbers. The data file is written before the
    manifest, so a crash between the two leaves no manifest and the set counts as absent.
    """
    directory = Path(directory)
    checksum = write_arrays(directory / "references.npz", arrays)
    atomic_write_json(
        directory / MANIFEST,
        {
            "kind": "references",
            "format": FORMAT_VERSION,
            "task_config": task.config_dict(),
            "task_hash": task.config_hash(),
            "method": method,
            "settings": settings,
            "shape": list(np.shape(arrays["ref_samples"])),
            "info": info,
            "checksums": {"references.npz": checksum},
        },
    )


def load_references(directory) -> tuple[dict, dict[str, np.ndarray]]:
    """(manifest, arrays) of a set saved by `save_references`, checksum verified.

    ValueError when `directory` holds another kind of artifact; the caller compares the
    manifest's task hash, method and settings with what it wants.
    """
    manifest = read_manifest(directory)
    if manifest.get("kind") != "references":
        raise ValueError(f"directory: {directory} holds a {manifest.get('kind')!r}, expected references")
    arrays = read_arrays(Path(directory) / "references.npz", manifest["checksums"]["references.npz"])
    return manifest, arrays
