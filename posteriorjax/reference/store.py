"""On-disk storage of pools and references: `.npz` chunk files plus JSON manifests.

Every artifact lives in a directory with a ``manifest.json`` holding the task
configuration (`Task.config_dict()`), its hash (`Task.config_hash()`), the
method, seed and sizes, and a SHA-256 checksum per data file, every file written
atomically by `posteriorjax.files` (which makes pool builds resumable). Loading an
artifact under a different task configuration is a `ValueError`; a file that fails
verification is a `files.CorruptFile`, which a rerun answers by `files.quarantine`-ing
it and rebuilding it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from posteriorjax.files import MANIFEST, atomic_write_json, read_arrays, read_manifest, write_arrays

FORMAT_VERSION = 1


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
