"""Observation operators: pure pytrees mapping a physical state to a flat vector.

An observation operator maps a full physical state to a flat vector. Every
operator acts on the trailing two axes `(..., H, W)` of its input and flattens
the leading axes too: a `(C, H, W)` or `(T, H, W)` state gives
`(prod(leading) * count,)`, ordered leading axes first (C-order), then the
per-field order of the operator. Every operator exposes

  * `mask`  -- bool `(H, W)`, the cells that enter the observation;
  * `count` -- int, values per field (`M = prod(leading) * count`);
  * `op(u) -> (M,)` -- jit/vmap/grad-able;
  * `op.to_grid(y, leading=None) -> (..., H, W)` -- the observation written back
    on the grid: observed values in place and zeros elsewhere for mask and
    column operators, the block average broadcast over its block for pooling.

Index arrays are pytree leaves and shapes/pattern metadata are static, so an
operator passes through `jit`/`vmap` as an argument; observations of one
pattern for different records share a tree structure and can be stacked and
vmapped over (`jax.tree.map(lambda *a: jnp.stack(a), *obs)`).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.grids import Grid


def _check_trailing(u, shape: tuple[int, int], name: str = "u") -> None:
    if jnp.ndim(u) < 2 or tuple(jnp.shape(u)[-2:]) != tuple(shape):
        raise ValueError(
            f"{name}: expected an array of shape (..., {shape[0]}, {shape[1]}), got {jnp.shape(u)}"
        )


def _as_shape(grid, name: str = "grid") -> tuple[int, int]:
    if isinstance(grid, Grid):
        return grid.shape
    if isinstance(grid, tuple) and len(grid) == 2 and all(isinstance(d, int) and d >= 1 for d in grid):
        return grid
    raise ValueError(f"{name}: expected a posteriorjax.grids.Grid or an (H, W) tuple, got {grid!r}")


class AbstractObservation(eqx.Module):
    """Linear observation of the trailing `(H, W)` axes of a state (see module doc)."""

    shape: eqx.AbstractVar[tuple[int, int]]

    @property
    @abc.abstractmethod
    def count(self) -> int:
        """Number of observed values per `(H, W)` field."""

    @property
    @abc.abstractmethod
    def mask(self) -> jax.Array:
        """Bool `(H, W)`: cells that enter the observation."""

    @abc.abstractmethod
    def _observe(self, fields: jax.Array) -> jax.Array:
        """`(K, H, W) -> (K, count)`."""

    @abc.abstractmethod
    def _fill(self, values: jax.Array) -> jax.Array:
        """`(K, count) -> (K, H, W)`."""

    def __call__(self, u) -> jax.Array:
        """Observe `u (..., H, W)`; returns `(prod(...) * count,)`."""
        _check_trailing(u, self.shape)
        u = jnp.asarray(u)
        return self._observe(u.reshape(-1, *self.shape)).reshape(-1)

    def to_grid(self, y, leading: Sequence[int] | None = None) -> jax.Array:
        """Write `y` (size `K * count`) back on the grid.

        Returns `(*leading, H, W)`; with `leading=None`, `(H, W)` when `K == 1`
        and `(K, H, W)` otherwise.
        """
        size = math.prod(jnp.shape(y))
        if leading is None:
            if size == 0 or size % self.count:
                raise ValueError(
                    f"y: expected a size that is a multiple of count={self.count}, got {jnp.shape(y)}"
                )
            k = size // self.count
            leading = () if k == 1 else (k,)
        else:
            leading = tuple(int(d) for d in leading)
            if size != math.prod(leading) * self.count:
                raise ValueError(
                    f"y: expected size prod(leading={leading}) * count={self.count}, got shape {jnp.shape(y)}"
                )
        values = jnp.reshape(y, (math.prod(leading), self.count))
        return self._fill(values).reshape(*leading, *self.shape)


class MaskObservation(AbstractObservation):
    """Point values at the True cells of a boolean `(H, W)` mask, in row-major order.

    Attributes:
      indices: int32 `(count,)` increasing flat (row-major) cell indices.
      observed: bool `(H, W)`, the mask (True at `indices`).
      shape: static `(H, W)`.
      name: static pattern name (``"mask"`` when built directly).
      params: static sorted `((key, value), ...)` pattern parameters.
      realized: static `((key, value), ...)` realized layout (counts, sizes).
      seed, record: uint32 / int32 scalars the positions were drawn from, or None.
    """

    indices: jax.Array
    observed: jax.Array
    shape: tuple[int, int] = eqx.field(static=True)
    name: str = eqx.field(static=True)
    params: tuple = eqx.field(static=True)
    realized: tuple = eqx.field(static=True)
    seed: np.ndarray | None
    record: np.ndarray | None

    def __init__(self, mask, *, name="mask", params=(), realized=(), seed=None, record=None):
        mask = np.asarray(mask)
        if mask.ndim != 2 or mask.dtype != np.bool_:
            raise ValueError(
                f"mask: expected a boolean (H, W) array, got dtype {mask.dtype} shape {mask.shape}"
            )
        if not mask.any():
            raise ValueError(f"mask: expected at least one observed (True) cell in a {mask.shape} mask")
        self.indices = jnp.asarray(np.flatnonzero(mask), dtype=jnp.int32)
        self.observed = jnp.asarray(mask)
        self.shape = (int(mask.shape[0]), int(mask.shape[1]))
        self.name = str(name)
        self.params = tuple(params)
        self.realized = tuple(realized)
        self.seed = None if seed is None else np.asarray(seed, dtype=np.uint32)
        self.record = None if record is None else np.asarray(record, dtype=np.int32)

    @property
    def count(self) -> int:
        return int(self.indices.shape[-1])

    @property
    def mask(self) -> jax.Array:
        return self.observed

    def _observe(self, fields):
        return jnp.take(fields.reshape(fields.shape[0], -1), self.indices, axis=-1)

    def _fill(self, values):
        h, w = self.shape
        out = jnp.zeros((values.shape[0], h * w), dtype=values.dtype)
        return out.at[:, self.indices].set(values).reshape(-1, h, w)


class AveragePool(AbstractObservation):
    """Low-resolution observation: means over non-overlapping `factor x factor` blocks.

    `count = (H / factor) * (W / factor)`, blocks in row-major order. `mask` is
    all True (every cell enters an average); `to_grid` broadcasts each block
    average over its block.
    """

    shape: tuple[int, int] = eqx.field(static=True)
    factor: int = eqx.field(static=True)

    def __init__(self, shape, factor: int):
        shape = _as_shape(shape, "shape")
        factor = checks.positive_int("factor", factor)
        if shape[0] % factor or shape[1] % factor:
            raise ValueError(f"factor: grid shape {shape} is not divisible by factor {factor}")
        self.shape = shape
        self.factor = int(factor)

    @property
    def count(self) -> int:
        return (self.shape[0] // self.factor) * (self.shape[1] // self.factor)

    @property
    def mask(self) -> jax.Array:
        return jnp.ones(self.shape, dtype=bool)

    def _observe(self, fields):
        s, (h, w) = self.factor, self.shape
        return fields.reshape(-1, h // s, s, w // s, s).mean(axis=(2, 4)).reshape(fields.shape[0], -1)

    def _fill(self, values):
        s, (h, w) = self.factor, self.shape
        coarse = values.reshape(-1, h // s, w // s)
        return jnp.repeat(jnp.repeat(coarse, s, axis=1), s, axis=2)


class ColumnObservation(AbstractObservation):
    """Well logs: full columns `columns` (all rows), ordered well-major `(k, H)`.

    Attributes:
      columns: int32 `(k,)` distinct column indices, in the given order.
      shape: static `(H, W)`.
    """

    columns: jax.Array
    shape: tuple[int, int] = eqx.field(static=True)

    def __init__(self, shape, columns):
        shape = _as_shape(shape, "shape")
        cols = np.asarray(columns)
        if cols.ndim != 1 or cols.size == 0 or not np.issubdtype(cols.dtype, np.integer):
            raise ValueError(f"columns: expected a non-empty 1-D sequence of integers, got {columns!r}")
        if cols.min() < 0 or cols.max() >= shape[1] or np.unique(cols).size != cols.size:
            raise ValueError(f"columns: expected distinct indices in [0, {shape[1]}), got {cols.tolist()}")
        self.columns = jnp.asarray(cols, dtype=jnp.int32)
        self.shape = shape

    @property
    def count(self) -> int:
        return int(self.columns.shape[-1]) * self.shape[0]

    @property
    def mask(self) -> jax.Array:
        return jnp.zeros(self.shape, dtype=bool).at[:, self.columns].set(True)

    def _observe(self, fields):
        return jnp.swapaxes(fields[:, :, self.columns], 1, 2).reshape(fields.shape[0], -1)

    def _fill(self, values):
        h = self.shape[0]
        wells = jnp.swapaxes(values.reshape(values.shape[0], -1, h), 1, 2)
        return jnp.zeros((values.shape[0], *self.shape), dtype=values.dtype).at[:, :, self.columns].set(wells)
