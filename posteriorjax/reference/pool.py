"""Prior pools: candidate pairs (x, u = physics(x)) drawn in chunks, written to disk as they finish.

Chunk `c` of a pool with seed `s` draws member `i` from the prior with key
`fold_in(fold_in(key(s), c), i)`, so a chunk's content depends only on
(task, seed, chunk index, chunk size): chunks can be computed in any order, on
any number of devices, and a build that is killed resumes by computing exactly
the missing chunks. Each chunk is one vmapped, jitted program sharded over the
1-D data mesh of `posteriorjax.parallel`; it is written atomically as
``chunk_XXXXXX.npz`` (arrays ``x`` `(B, C, H, W)` when `store_unknown`, ``u``
`(B, C_u, H, W)` when `store_state`, and ``y`` `(B, M)` = noise-free
observations) followed by a ``chunk_XXXXXX.json`` sidecar holding its SHA-256
and one per array, so a rejection scan reads and verifies only ``y``. A chunk
counts as done only when its sidecar exists.

Since every draw is a pure function of its key, a pool may store only ``y``
(`store_unknown=False`, `M` numbers per candidate instead of `C H W`): reading
``x`` then redraws the requested candidates from their keys (prior sampling only,
no solve). That is what makes pools of 1e7 candidates fit on a disk.

Augmentation (`augment=True`, for isotropic tasks on a square domain: Darcy and
Poisson; never for CCS/LTMI) appends the 90/180/270-degree rotations of each
(x, u) pair: since the prior is rotation invariant and the physics rotation
equivariant, a rotated pair is again a prior draw with its exact state, at no
extra solve. A chunk then holds `4 B` candidates (rotation-major). The build
checks equivariance on one draw and refuses tasks that are not.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks, console, files, parallel
from posteriorjax.reference import store


def _chunk_name(index: int) -> str:
    return f"chunk_{index:06d}"


def _rotations(x: jax.Array) -> jax.Array:
    """`(4, ...)`: x rotated by 0, 90, 180, 270 degrees in its last two axes."""
    return jnp.stack([jnp.rot90(x, k, axes=(-2, -1)) for k in range(4)])


def draw_candidates(task, chunk_key, indices: jax.Array, *, augment: bool = False):
    """Prior draws and their states for `indices (B,)`: `(x, u, y)` with leading size B (4 B if augment).

    Member i uses `fold_in(chunk_key, i)`; y = observation(u) is noise-free.
    """

    def one(i):
        x = task.prior.sample(jr.fold_in(chunk_key, i))
        return x, task.physics(x)

    x, u = jax.vmap(one)(indices)
    if augment:
        # one solve gives four candidates (a rotation-invariant prior, and physics that commutes
        # with quarter turns: `check_equivariance`). Rotation-major order: candidate r B + i is
        # member i turned r times, the layout `Pool.redraw` reads back by position // B, % B.
        x = jnp.moveaxis(jax.vmap(_rotations)(x), 1, 0).reshape((-1,) + x.shape[1:])
        u = jnp.moveaxis(jax.vmap(_rotations)(u), 1, 0).reshape((-1,) + u.shape[1:])
    return x, u, jax.vmap(task.observation)(u)


@eqx.filter_jit
def _draw_chunk(task, chunk_key, indices, augment: bool, sharding):
    """`draw_candidates` as one compiled program per (task structure, chunk size, augment, sharding).

    Module-level, so repeated (time-boxed or resumed) `build` calls in one process reuse the program.
    """
    out = draw_candidates(task, chunk_key, indices, augment=augment)
    return jax.lax.with_sharding_constraint(out, sharding)


def check_equivariance(task, key, *, rtol: float = 1e-3) -> None:
    """Raise ValueError unless physics(rot90(x)) == rot90(physics(x)) for one prior draw."""
    h, w = task.unknown_shape[-2:]
    if h != w:
        raise ValueError(f"augment: rotations need a square domain, task {task.name!r} has {h} x {w}")
    x = task.prior.sample(key)
    u_rot = task.physics(jnp.rot90(x, 1, axes=(-2, -1)))
    rot_u = jnp.rot90(task.physics(x), 1, axes=(-2, -1))
    err = float(jnp.linalg.norm(u_rot - rot_u) / (jnp.linalg.norm(rot_u) + 1e-30))
    if not err <= rtol:
        raise ValueError(
            f"augment: task {task.name!r} is not rotation equivariant (relative error {err:.2e}); "
            "use augment=False"
        )


@eqx.filter_jit
def _redraw(prior, chunk_key, members, rotations, augment: bool = True):
    """Prior draws `members (n,)` of one chunk, each rotated by `rotations (n,)` quarter turns

    (`augment=False`: no rotation, so non-square fields such as the CCS radial grid redraw too)."""

    def one(i, k):
        x = prior.sample(jr.fold_in(chunk_key, i))
        return _rotations(x)[k] if augment else x

    return jax.vmap(one)(members, rotations)


@dataclasses.dataclass(frozen=True)
class Pool:
    """A prior pool on disk (read side). `size` counts finished candidates.

    `task` (optional) is needed only to read ``x`` from a pool built with `store_unknown=False`.
    """

    directory: Path
    manifest: dict
    task: object = None

    @classmethod
    def open(cls, directory, task=None) -> Pool:
        """Open a pool; with `task`, ValueError unless it was built for that exact task config."""
        manifest = files.read_manifest(directory)
        if manifest.get("kind") != "pool":
            raise ValueError(f"directory: {directory} holds a {manifest.get('kind')!r}, expected a pool")
        if task is not None:
            store.check_task(manifest, task, "pool")
        return cls(Path(directory), manifest, task)

    @property
    def stores_unknown(self) -> bool:
        return self.manifest.get("store_unknown", True)

    @property
    def per_chunk(self) -> int:
        return self.manifest["chunk_size"] * (4 if self.manifest["augment"] else 1)

    def done_chunks(self) -> list[int]:
        return [
            i
            for i in range(self.manifest["num_chunks"])
            if (self.directory / f"{_chunk_name(i)}.json").exists()
        ]

    @property
    def complete(self) -> bool:
        return len(self.done_chunks()) == self.manifest["num_chunks"]

    @property
    def size(self) -> int:
        return len(self.done_chunks()) * self.per_chunk

    def redraw(self, index: int, positions) -> np.ndarray:
        """`x` of the candidates at `positions` within chunk `index`, redrawn from their keys."""
        if self.task is None:
            raise ValueError(
                f"task: pool {self.directory} stores no x (store_unknown=False); open it with "
                "Pool.open(directory, task) to redraw candidates"
            )
        positions = jnp.asarray(positions, jnp.int32)
        size = self.manifest["chunk_size"]
        key = jr.fold_in(jr.key(self.manifest["seed"]), index)
        augment = bool(self.manifest["augment"])
        return np.asarray(_redraw(self.task.prior, key, positions % size, positions // size, augment))

    def read_chunk(self, index: int, fields: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """Arrays of chunk `index` (checksum-verified); with `fields`, only those are read from disk

        (chunks written before per-field checksums existed are read whole, then subset). A pool
        that does not store ``x`` redraws it (`redraw`).
        """
        if not self.stores_unknown and (fields is None or "x" in fields):
            rest = None if fields is None else tuple(f for f in fields if f != "x")
            arrays = self._read_stored(index, rest) if rest != () else {}
            return {"x": self.redraw(index, np.arange(self.per_chunk))} | arrays
        return self._read_stored(index, fields)

    def _read_stored(self, index: int, fields: tuple[str, ...] | None) -> dict[str, np.ndarray]:
        name = _chunk_name(index)
        meta = json.loads((self.directory / f"{name}.json").read_text())
        path = self.directory / f"{name}.npz"
        if fields is not None and "field_sha256" in meta:
            missing = [f for f in fields if f not in meta["field_sha256"]]
            if missing:
                raise ValueError(
                    f"fields: chunk {index} has no {missing}; it has {sorted(meta['field_sha256'])}"
                )
            return files.read_fields(path, {f: meta["field_sha256"][f] for f in fields})
        arrays = files.read_arrays(path, meta["sha256"])
        return arrays if fields is None else {f: arrays[f] for f in fields}

    def iter_chunks(
        self, fields: tuple[str, ...] | None = None
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Yield `(first candidate index, arrays)` for every finished chunk, in order (only `fields`)."""
        for position, index in enumerate(self.done_chunks()):
            yield position * self.per_chunk, self.read_chunk(index, fields)

    def load(self, field: str = "x") -> np.ndarray:
        """All finished candidates' `field` (``"x"``, ``"u"`` or ``"y"``), concatenated."""
        return np.concatenate([arrays[field] for _, arrays in self.iter_chunks((field,))])

    def gather(self, indices, field: str = "x") -> np.ndarray:
        """Candidates `indices` (positions in `load` order) of `field`, reading only the chunks needed."""
        indices = np.asarray(indices, np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.size):
            raise ValueError(
                f"indices: expected values in [0, {self.size}), got [{indices.min()}, {indices.max()}]"
            )
        done = self.done_chunks()
        out = None
        for pos in np.unique(indices // self.per_chunk):
            sel = indices // self.per_chunk == pos
            if field == "x" and not self.stores_unknown:
                arrays = self.redraw(done[pos], indices[sel] - pos * self.per_chunk)
                if out is None:
                    out = np.empty((indices.size,) + arrays.shape[1:], arrays.dtype)
                out[sel] = arrays
                continue
            arrays = self.read_chunk(done[pos], (field,))[field]
            if out is None:
                out = np.empty((indices.size,) + arrays.shape[1:], arrays.dtype)
            out[sel] = arrays[indices[sel] - pos * self.per_chunk]
        return out


def build(
    task,
    directory,
    *,
    seed: int,
    num_chunks: int,
    chunk_size: int,
    augment: bool = False,
    store_state: bool = True,
    store_unknown: bool = True,
    progress: bool = True,
    max_new_chunks: int | None = None,
    mesh=None,
) -> Pool:
    """Build (or resume) a pool of `num_chunks * chunk_size` prior draws (x4 with `augment`).

    `store_state=False` drops u, `store_unknown=False` drops x (redrawn from its key on read).
    Resumes from `directory` when it already holds a pool of the same task,
    seed, chunk size, augmentation and storage; `num_chunks` may grow between
    runs (the first chunks are unchanged). `max_new_chunks` stops after that
    many newly computed chunks (time-boxed builds). ValueError on a mismatch. Every finished
    chunk is verified against its sidecar checksum first; a corrupt one is set aside
    (`files.quarantine`) and recomputed.
    """
    num_chunks = checks.positive_int("num_chunks", num_chunks)
    chunk_size = checks.positive_int("chunk_size", chunk_size)
    directory = Path(directory)
    spec = {
        "kind": "pool",
        "format": store.FORMAT_VERSION,
        "task_config": task.config_dict(),
        "task_hash": task.config_hash(),
        "method": "prior_pool",
        "seed": int(seed),
        "chunk_size": chunk_size,
        "augment": bool(augment),
        "store_state": bool(store_state),
        "store_unknown": bool(store_unknown),
    }
    defaults = {"store_unknown": True}  # manifests older than the setting
    if (directory / files.MANIFEST).exists():
        old = files.read_manifest(directory)
        store.check_task(old, task, "pool")
        diff = {
            k: (old.get(k, defaults.get(k)), v)
            for k, v in spec.items()
            if k != "task_config" and old.get(k, defaults.get(k)) != v
        }
        if diff:
            raise ValueError(f"directory: {directory} holds a pool with other settings (old, new): {diff}")
    elif augment:
        check_equivariance(task, jr.split(jr.key(seed))[0])
    files.atomic_write_json(directory / files.MANIFEST, {**spec, "num_chunks": num_chunks})
    pool = Pool.open(directory, task)
    for index in pool.done_chunks():  # a chunk failing its checksum is set aside and recomputed
        name = _chunk_name(index)
        try:
            meta = json.loads((directory / f"{name}.json").read_text())
            files.read_arrays(directory / f"{name}.npz", meta["sha256"])
        except (files.CorruptFile, OSError, KeyError, TypeError, json.JSONDecodeError) as e:
            files.quarantine(directory / f"{name}.json", f"chunk {index}: {e}")
            if (directory / f"{name}.npz").exists():
                files.quarantine(directory / f"{name}.npz", f"chunk {index}: {e}")

    mesh = parallel.data_mesh() if mesh is None else mesh
    sharding = parallel.batch_sharding(mesh)
    done = set(pool.done_chunks())
    todo = [i for i in range(num_chunks) if i not in done]
    if max_new_chunks is not None:
        todo = todo[:max_new_chunks]
    base = jr.key(seed)
    stage = console.Stage(f"pool {task.name}", len(todo) * pool.per_chunk, "candidates", enabled=progress)
    with stage:
        for index in todo:
            idx, size = parallel.shard_batch(jnp.arange(chunk_size), mesh)
            x, u, y = jax.device_get(_draw_chunk(task, jr.fold_in(base, index), idx, bool(augment), sharding))
            if augment:  # drop padding of each rotation block
                x, u, y = (
                    a.reshape((4, -1) + a.shape[1:])[:, :size].reshape((-1,) + a.shape[1:]) for a in (x, u, y)
                )
            else:
                x, u, y = x[:size], u[:size], y[:size]
            arrays = {"y": y} | ({"x": x} if store_unknown else {}) | ({"u": u} if store_state else {})
            name = _chunk_name(index)
            checksum = files.write_arrays(directory / f"{name}.npz", arrays)
            fields = {k: files.array_checksum(a) for k, a in arrays.items()}
            sidecar = {"sha256": checksum, "field_sha256": fields, "size": int(x.shape[0])}
            files.atomic_write_json(directory / f"{name}.json", sidecar)
            stage.update(pool.per_chunk)
    return pool
