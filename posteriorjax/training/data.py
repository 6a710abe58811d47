"""Data sources of the loop: Equinox modules `source(key) -> batch` called inside the jitted step.

`TaskSource` draws prior samples (and solves the physics) on the fly, through its kind's
`example`; `PoolSource` indexes a stored pool built once by `build_pool`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import nn
from posteriorjax.training import kinds


class TaskSource(eqx.Module):
    """On-the-fly batches: `batch_size` prior draws (and physics solves) per call, key `fold_in`-split.

    `inputs`: the trained networks ({role: model}) a kind with `inputs` computes its examples with
    (frozen: the source is an argument of the jitted step, not a parameter).
    """

    task: Any
    x_norm: nn.Normalizer
    u_norm: nn.Normalizer | None
    kind: str = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    inputs: dict = eqx.field(default_factory=dict)

    def __check_init__(self):
        needed = set(kinds.get(self.kind).inputs)
        if set(self.inputs) != needed:
            raise ValueError(f"inputs: kind {self.kind!r} needs {sorted(needed)}, got {sorted(self.inputs)}")

    def example(self, key):
        """One training example of the source's kind (`kinds.get(kind).example`)."""
        return kinds.get(self.kind).example(self.task, self.x_norm, self.u_norm, key, **self.inputs)

    def __call__(self, key):
        return jax.vmap(self.example)(jr.split(key, self.batch_size))


class PoolSource(eqx.Module):
    """Batches drawn uniformly with replacement from a stored pool (pytree with leading axis N)."""

    pool: Any
    batch_size: int = eqx.field(static=True)

    def __call__(self, key):
        size = jax.tree.leaves(self.pool)[0].shape[0]
        idx = jr.randint(key, (self.batch_size,), 0, size)
        return jax.tree.map(lambda a: a[idx], self.pool)


def build_pool(source: TaskSource, size: int, seed: int, path: Path | None = None, tag: str = ""):
    """`size` examples of `source` (example i from `fold_in(key(seed), i)`), cached at `path` (.npz).

    A cached pool is reused only if its stored `tag` (task and normalization hash) matches.
    """
    if path is not None and path.exists():
        data = np.load(path, allow_pickle=False)
        if str(data["tag"]) == tag and int(data["size"]) == size:
            leaves = [jnp.asarray(data[f"leaf{i}"]) for i in range(int(data["num_leaves"]))]
            return jax.tree.unflatten(jax.tree.structure(source.example(jr.key(0))), leaves)
        warnings.warn(f"pool {path} was built for another configuration; rebuilding", stacklevel=2)
    base = jr.key(seed)
    pool = jax.jit(lambda i: jax.lax.map(lambda j: source.example(jr.fold_in(base, j)), i, batch_size=64))(
        jnp.arange(size)
    )
    if path is not None:
        leaves = jax.tree.leaves(pool)
        arrays = {f"leaf{i}": np.asarray(x) for i, x in enumerate(leaves)}
        np.savez(path, tag=tag, size=size, num_leaves=len(leaves), **arrays)
    return pool
