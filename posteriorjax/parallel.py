"""Meshes and shardings: one data axis over every device of every host.

The batch axis of a computation (pool chunk, sweep configurations) is sharded
over a 1-D `Mesh` named ``"data"``; arrays are padded to a multiple of the device
count and the padding is dropped afterwards. With one device this is a no-op, so
the same code runs on a laptop CPU, a GPU or a TPU pod (after
`jax.distributed.initialize()`, which only entry points call).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

AXIS = "data"


def data_mesh(devices=None) -> jax.sharding.Mesh:
    """1-D mesh over `devices` (default: all devices of all processes)."""
    devices = jax.devices() if devices is None else list(devices)
    return jax.sharding.Mesh(np.asarray(devices), (AXIS,))


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Sharding of the leading axis over the mesh's data axis."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def padded_size(size: int, mesh: jax.sharding.Mesh) -> int:
    """Smallest multiple of the device count that is >= size."""
    n = mesh.devices.size
    return int(math.ceil(size / n) * n)


def pad_leading(tree, size: int):
    """Pad every leaf's leading axis to `size` by repeating its last entry (results then discarded)."""

    def pad(x):
        extra = size - x.shape[0]
        if extra < 0:
            raise ValueError(f"size: expected >= leading size {x.shape[0]}, got {size}")
        if extra == 0:
            return x
        return jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)], axis=0)

    return jax.tree.map(pad, tree)


def shard_batch(tree, mesh: jax.sharding.Mesh):
    """Pad the leading axis to a multiple of the device count and shard it; returns (tree, true size)."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError("tree: expected at least one array leaf")
    size = leaves[0].shape[0]
    padded = pad_leading(tree, padded_size(size, mesh))
    return jax.device_put(padded, batch_sharding(mesh)), size


def global_tree(tree, sharding: NamedSharding):
    """Every leaf as a global `jax.Array` with `sharding`, built from the same host value on every process.

    Each process supplies only the shards of its own devices
    (`jax.make_array_from_callback`), so this works with one process and with many.
    """

    def put(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, tree)
