"""Sorting floats by integer keys: `jnp.sort`'s order, several times faster on a CPU.

XLA's CPU sort runs a one-operand sort whose comparator is a plain integer `<` as a
native sort, but calls a compiled comparator per comparison for floats (JAX's sort
compares floats in a total order with -0.0 and NaN canonicalized) and for any sort with
a payload. Measured on the 2-core CPU: 410k float32 values 26 ms by integer keys against
110 ms `jnp.sort`; 4,096 columns of 100 members 13 ms against 33 ms (and 52 ms for a
vmapped `argsort` with gathers). A payload (argsort, or values carried with their
weights) makes even integer keys as slow as `jnp.sort`, so only payload-free sorts go
through here.

`sortable_keys` maps a float to a signed integer of the same width whose `<` is JAX's sort
order: -0.0 and +0.0 equal (canonicalized to +0.0, as JAX does; a CPU that treats
denormals as zero sorts them as zero too, as JAX does), every NaN after +inf. The map is
its own inverse on canonical values, so `sort` returns values equal (`==`) to `jnp.sort`'s,
in the same order: -0.0 comes back as +0.0, a NaN as the canonical NaN and, where the CPU
treats denormals as zero, a denormal as +0.0.

`INTEGER_KEYS = False` (read when a program is traced) restores `jnp.sort`, the
benchmark's baseline (`scripts/bench/metrics.py`). Jitted metric helpers keep the program
they were first traced with, so switch it with `integer_keys(enabled)`, which clears JAX's
caches on entry and exit.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

INTEGER_KEYS = True


@contextlib.contextmanager
def integer_keys(enabled: bool):
    """Trace with `INTEGER_KEYS = enabled` inside the block (JAX's caches cleared around it)."""
    global INTEGER_KEYS
    saved = INTEGER_KEYS
    jax.clear_caches()
    INTEGER_KEYS = bool(enabled)
    try:
        yield
    finally:
        INTEGER_KEYS = saved
        jax.clear_caches()


_INT = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}


def _key_dtype(dtype):
    if not jnp.issubdtype(dtype, jnp.floating) or np.dtype(dtype).itemsize not in _INT:
        raise TypeError(f"x: expected a real floating dtype of 16, 32 or 64 bits, got {dtype}")
    return _INT[np.dtype(dtype).itemsize]


def _flip(bits):
    """Reverse the magnitude bits of negative numbers (an involution keeping the sign bit)."""
    nbits = 8 * bits.dtype.itemsize
    magnitude = np.array((1 << (nbits - 1)) - 1, bits.dtype)
    return bits ^ (lax.shift_right_arithmetic(bits, np.array(nbits - 1, bits.dtype)) & magnitude)


def sortable_keys(x):
    """Signed integer keys of float `x` (same shape): key order = JAX's sort order of `x`."""
    x = jnp.asarray(x)
    itype = _key_dtype(x.dtype)
    canonical = jnp.where(x == 0, jnp.zeros_like(x), x)
    canonical = jnp.where(jnp.isnan(x), jnp.full_like(x, jnp.nan), canonical)
    return _flip(lax.bitcast_convert_type(canonical, itype))


def from_keys(keys, dtype):
    """The float values `(same shape)` whose `sortable_keys` are `keys`."""
    return lax.bitcast_convert_type(_flip(keys), dtype)


def sort(x, axis: int = -1):
    """`jnp.sort(x, axis)` for a real float `x` (-0.0 returned as +0.0), by integer keys.

    Differentiable as `jnp.sort` (the derivative follows the sorting permutation, which only a
    derivative computes, by `argsort`).
    """
    x = jnp.asarray(x)
    if not INTEGER_KEYS or not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.sort(x, axis=axis)
    return _sort_by_keys(x, axis % max(x.ndim, 1))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _sort_by_keys(x, axis):
    keys = lax.sort(sortable_keys(x), dimension=axis, is_stable=False)
    return from_keys(keys, x.dtype)


@_sort_by_keys.defjvp
def _sort_by_keys_jvp(axis, primals, tangents):
    (x,), (t,) = primals, tangents
    order = jnp.argsort(x, axis=axis)
    return jnp.take_along_axis(x, order, axis=axis), jnp.take_along_axis(t, order, axis=axis)


def median(x):
    """`jnp.median(x)` over all elements (NaN if any is NaN), from `sort`'s order statistics.

    The same linear interpolation as `jnp.quantile(x, 0.5)`: q = (n - 1) / 2,
    x_(floor q) (1 - f) + x_(ceil q) f with f = q - floor q.
    """
    x = jnp.asarray(x)
    if not INTEGER_KEYS or not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.median(x)
    s = sort(x.ravel())
    q = np.asarray(0.5, x.dtype) * np.asarray(x.size - 1, x.dtype)
    low, high = int(np.floor(q)), int(np.ceil(q))
    hw = np.asarray(q - np.floor(q), x.dtype)
    value = s[low] * (np.asarray(1, x.dtype) - hw) + s[high] * hw
    return jnp.where(jnp.any(jnp.isnan(x)), jnp.asarray(jnp.nan, x.dtype), value)
