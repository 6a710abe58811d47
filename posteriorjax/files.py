"""Files on disk: atomic writers, checksums, `.npz` arrays, manifests, digests and provenance.

The ground floor of the package: every other package may import it and it imports none of them
(as diffrax's `_misc.py`), so a writer, a checksum or a digest has one place however high its
caller sits.

Every file is written atomically (to a temporary name in the same directory, flushed, fsync-ed,
then `os.replace`d), so a process killed at any point leaves either the old file or the new one,
never a torn one: that is what makes pool builds, reference sets and results files resumable. A
file that fails verification (checksum, truncation) raises `CorruptFile`, which a rerun answers by
setting it aside (`quarantine`, renamed; `copy_aside`, copied) and rebuilding it.

Digests are SHA-256 hex strings: `sha256` of bytes, `json_digest` of a JSON value (sorted keys),
`array_checksum` of an array's bytes, `file_digest` of a file or folder, `parameter_digest` of a
model's parameter values.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
import zipfile
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

MANIFEST = "manifest.json"

# ----------------------------------------------------------------------------
# Atomic writers


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


def atomic_write_json(path, obj) -> None:
    """Write `obj` as indented JSON (sorted keys; a non-JSON value as its `str`) atomically."""
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def atomic_write_lines(path, lines) -> None:
    """Rewrite a JSON-lines file atomically with `lines` (strings without their newline)."""
    atomic_write_bytes(path, "".join(line + "\n" for line in lines).encode())


def append_lines(path, lines) -> None:
    """Append `lines` (strings without their newline) in one write, flushed and fsync-ed.

    A kill mid-write can tear only the last line, which the reader of the file skips.
    """
    with open(path, "a") as f:
        f.write("".join(line + "\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------
# Files that fail verification


class CorruptFile(ValueError):
    """A stored file failed verification: `path` and `reason` (what failed)."""

    def __init__(self, path, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"path: {reason} for {path} (file corrupted or replaced)")


def _free_aside(path: Path) -> Path:
    n = 0
    while (aside := path.with_name(f"{path.name}.corrupt-{n}")).exists():
        n += 1
    return aside


def quarantine(path, reason: str) -> Path:
    """Rename `path` (file or directory) aside to `<name>.corrupt-<n>` (first free n), with a warning.

    The file is kept for inspection, never deleted; the caller then rebuilds it. Returns the new path.
    """
    path = Path(path)
    aside = _free_aside(path)
    os.replace(path, aside)
    warnings.warn(f"{path}: {reason}; set aside as {aside.name} and rebuilt", stacklevel=2)
    return aside


def copy_aside(path, reason: str) -> Path:
    """Copy `path` to `<name>.corrupt-<n>` (first free n) with a warning; the original stays
    (the caller rewrites it with what still verifies)."""
    path = Path(path)
    aside = _free_aside(path)
    shutil.copyfile(path, aside)
    warnings.warn(
        f"{reason}; dropped (recomputed on resume), the file copied aside as {aside.name}", stacklevel=3
    )
    return aside


# ----------------------------------------------------------------------------
# Digests


def sha256(data: bytes) -> str:
    """SHA-256 (hex) of `data`."""
    return hashlib.sha256(data).hexdigest()


def json_digest(obj, length: int | None = None) -> str:
    """SHA-256 (hex, the first `length` digits when given) of `obj` as JSON with sorted keys
    (a value JSON cannot encode as its `str`): the hash of a configuration."""
    return sha256(json.dumps(obj, sort_keys=True, default=str).encode())[:length]


def file_digest(path) -> str:
    """SHA-256 (hex) of a file's bytes, or of a folder's files (relative paths and bytes, sorted)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(path)).encode() if f != path else b"")
        h.update(f.read_bytes())
    return h.hexdigest()


def array_checksum(array) -> str:
    """SHA-256 of an array's C-order bytes (dtype and shape are checked separately by the reader)."""
    return sha256(np.ascontiguousarray(array).tobytes())


def parameter_digest(model) -> str:
    """Hash (16 hex digits) of a model's parameter values: shapes, dtypes and bytes of its
    inexact arrays, in leaf order. Two models with equal digests compute the same function."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)):
        x = np.asarray(x)
        h.update(f"{x.shape}{x.dtype}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------
# Arrays (.npz) and manifests (JSON)


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


def sidecar_path(path) -> Path:
    """The file holding the SHA-256 (hex) of an `.npz` written by `write_arrays_checked`:
    `<name>.npz.sha256`."""
    return Path(path).with_name(Path(path).name + ".sha256")


def write_arrays_checked(path, arrays: dict[str, np.ndarray]) -> None:
    """Write named arrays atomically as `.npz` with their SHA-256 beside them (`sidecar_path`):
    a file that carries its own checksum, without a manifest."""
    checksum = write_arrays(path, arrays)
    atomic_write_bytes(sidecar_path(path), checksum.encode())


def read_arrays_checked(path) -> dict[str, np.ndarray]:
    """The arrays of a file written by `write_arrays_checked`, verified (`CorruptFile` on a bad
    checksum or a torn file); without its sidecar the file is only checked to be readable."""
    sidecar = sidecar_path(path)
    checksum = sidecar.read_text().strip() if sidecar.exists() else None
    return read_arrays(path, checksum)


def h5py_module(what: str = "reading .h5 files"):
    """The `h5py` module (an optional dependency, the `exchange` extra); ModuleNotFoundError
    naming `what` needs it and what to install when it is missing."""
    try:
        import h5py
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"{what} needs h5py: pip install 'posteriorjax[exchange]'") from e
    return h5py


def read_array_file(path) -> dict[str, np.ndarray]:
    """Every array of an `.npz` or `.h5` file by name, never unpickled (`.h5`: root datasets;
    attributes as 0-d arrays; byte strings as `str`). A file written by someone else: an object
    array is a ValueError saying what to save instead."""
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
        h5py = h5py_module()
        with h5py.File(path, "r") as f:
            out = {k: np.asarray(f.attrs[k]) for k in f.attrs}
            out.update({k: f[k][()] for k in f.keys() if isinstance(f[k], h5py.Dataset)})
        return {k: (v.astype(str) if v.dtype.kind in "SO" else v) for k, v in out.items()}
    raise ValueError(f"path: expected a .npz or .h5 file, got {path}")


def encode_h5(arrays: dict[str, np.ndarray]) -> bytes:
    """`.h5` bytes of named arrays (root datasets; unicode strings stored as bytes), for
    `atomic_write_bytes`; needs h5py."""
    h5py = h5py_module("writing .h5 files")
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        for k, v in arrays.items():
            v = np.asarray(v)
            f.create_dataset(k, data=v.astype("S") if v.dtype.kind == "U" else v)
    return buf.getvalue()


def read_manifest(directory) -> dict:
    """The `manifest.json` of `directory` as a dict; ValueError when absent, `CorruptFile` when
    it is not a JSON object."""
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


# ----------------------------------------------------------------------------
# Provenance


VERSIONED = ("posteriorjax", "jax", "jaxlib", "equinox", "numpy", "optax", "diffrax", "lineax")


def utc_now() -> str:
    """The current date and time, e.g. ``2026-01-31 12:00 UTC``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> dict:
    """``{"platform": "<system> <architecture>", "cpu_count": n}`` of this machine."""
    return {"platform": f"{platform.system()} {platform.machine()}", "cpu_count": os.cpu_count()}


def git_revision() -> str | None:
    """The git revision of the checkout this package is imported from (None outside one)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def provenance(seeds: dict) -> dict:
    """Package versions, machine, devices, git revision and seeds of a run (`provenance.json`)."""
    versions = {}
    for pkg in VERSIONED:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "date_utc": utc_now(),
        "machine": machine(),
        "versions": versions,
        "python": platform.python_version(),
        "devices": [str(d) for d in jax.devices()],
        "process_count": jax.process_count(),
        "git_revision": git_revision(),
        "seeds": seeds,
    }
