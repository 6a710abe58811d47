"""Sorting floats by integer keys: `jnp.sort`'s order, without XLA's comparator calls on a CPU.

XLA's CPU sort runs a one-operand sort whose comparator is a plain integer `<` as a
native sort, but calls a compiled comparator per comparison for floats (JAX's sort
compares floats in a total order with -0.0 and NaN canonicalized) and for any sort with
a payload. A payload (argsort, or values carried with their weights) makes even integer
keys as slow as `jnp.sort`, so only payload-free sorts go through here. The timings:
docs/studies/performance.md ("Sorts").

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

On a CPU, large sorts go through a bitonic sorting network instead (`method="auto"`,
`uses_network`): the keys pass through log2(P) (log2(P) + 1) / 2 compare-exchange stages
(P the length padded to a power of two), each an elementwise integer `minimum`/`maximum` over
the whole array, which XLA vectorizes and splits over the cores, against `lax.sort`'s one
scalar comparison at a time on one core. It sorts the same keys, so it returns the same values
bit for bit. Its cost is compilation (about one fusion per two stages), so it is only chosen
above `NETWORK_MIN_COLUMNS`, `NETWORK_MIN_SEQUENCE` or
`NETWORK_MIN_PAYLOAD` elements; accelerators keep `lax.sort`, whose GPU and TPU sorts are
already parallel.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

INTEGER_KEYS = True
SORT_METHODS = ("auto", "keys", "network")
# CPU sizes (elements) from which `method="auto"` takes the network (`uses_network`)
NETWORK_MIN_COLUMNS = 1 << 16  # many columns sorted side by side (at least 8 rows each)
NETWORK_MIN_SEQUENCE = 1 << 17  # one sequence
NETWORK_MIN_PAYLOAD = 1 << 14  # values sorted with a payload, in all
NETWORK_ROWS = 8192  # rows of the (rows, P / rows) layout a single sequence is sorted in


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


def sort(x, axis: int = -1, *, method: str = "auto"):
    """`jnp.sort(x, axis)` for a real float `x` (-0.0 returned as +0.0), by integer keys.

    `method`: ``"keys"`` sorts the keys with `lax.sort`, ``"network"`` with the bitonic
    network, ``"auto"`` picks by backend and size (`uses_network`). All return the same
    values. Differentiable as `jnp.sort` (the derivative follows the sorting permutation,
    which only a derivative computes, by `argsort`).
    """
    _check_method(method)
    x = jnp.asarray(x)
    if not INTEGER_KEYS or not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.sort(x, axis=axis)
    axis = axis % max(x.ndim, 1)
    return _sort_by_keys(x, axis, _resolve(method, x, axis, payload=False))


def _check_method(method):
    if method not in SORT_METHODS:
        raise ValueError(f"method: expected one of {SORT_METHODS}, got {method!r}")


def _resolve(method: str, x, axis: int, *, payload: bool) -> str:
    """``"keys"`` or ``"network"`` for sorting `x` along `axis` (``"auto"`` by `uses_network`)."""
    if method != "auto":
        return method
    length = x.shape[axis] if x.ndim else 1
    return "network" if uses_network(length, max(x.size, 1) // max(length, 1), payload=payload) else "keys"


def uses_network(length: int, columns: int, *, payload: bool = False) -> bool:
    """Whether `method="auto"` takes the network for `columns` sequences of `length` each.

    On the CPU backend only: one sequence of at least `NETWORK_MIN_SEQUENCE` elements, or
    several of at least 8 elements and `NETWORK_MIN_COLUMNS` elements in all; with a payload
    (`argsort`, whose `lax.sort` is comparator-bound) from `NETWORK_MIN_PAYLOAD`.
    """
    if jax.default_backend() != "cpu" or length < 8:
        return False
    if payload:
        return length * columns >= NETWORK_MIN_PAYLOAD
    if columns == 1:
        return length >= NETWORK_MIN_SEQUENCE
    return length * columns >= NETWORK_MIN_COLUMNS


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _sort_by_keys(x, axis, method):
    keys = sortable_keys(x)
    if method == "network" and x.ndim:
        keys = _network_sort(keys, axis)
    else:  # along the minor axis: XLA's CPU sort of a major axis is about 4x slower
        last = max(x.ndim - 1, 0)
        keys = jnp.moveaxis(
            lax.sort(jnp.moveaxis(keys, axis, last), dimension=last, is_stable=False), last, axis
        )
    return from_keys(keys, x.dtype)


@_sort_by_keys.defjvp
def _sort_by_keys_jvp(axis, method, primals, tangents):
    (x,), (t,) = primals, tangents
    order = jnp.argsort(x, axis=axis)
    return jnp.take_along_axis(x, order, axis=axis), jnp.take_along_axis(t, order, axis=axis)


def argsort(x, axis: int = -1, *, method: str = "auto"):
    """Indices `(same shape, int32)` that sort a real float `x` along `axis`, in `jnp.sort`'s order.

    Tied values come in an unspecified order (not stable). ``"network"`` (chosen by ``"auto"``
    on a CPU from `NETWORK_MIN_PAYLOAD` elements, `uses_network`) carries the indices through
    the stages with two selects each; ``"keys"`` is `jnp.argsort`, whose payload makes XLA's
    CPU sort call a compiled comparator per comparison. Gather with the result
    (`jnp.take_along_axis`) to differentiate through the sorted values.
    """
    _check_method(method)
    x = jnp.asarray(x)
    axis = axis % max(x.ndim, 1)
    if method == "auto" and not (INTEGER_KEYS and jnp.issubdtype(x.dtype, jnp.floating)):
        method = "keys"
    if _resolve(method, x, axis, payload=True) == "keys" or not x.ndim:
        return jnp.argsort(x, axis=axis).astype(jnp.int32)
    index = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    return _network_sort(sortable_keys(lax.stop_gradient(x)), axis, index)[1]


def _network_sort(keys, axis: int, payload=None):
    """Integer `keys` sorted along `axis` by a bitonic network (same shape), and `payload` with them.

    Several sequences (the other axes) become the columns of a `(length, columns)` array sorted
    column by column; one sequence is laid out as `(NETWORK_ROWS, ceil(length / NETWORK_ROWS))`
    with element i at row i mod rows (the last column filled up with the dtype's largest key),
    so that most stages pair whole rows. Returns the keys, or `(keys, payload)` with a payload.
    """
    arrays = (keys,) if payload is None else (keys, payload)
    moved = [jnp.moveaxis(a, axis, 0) for a in arrays]
    shape = moved[0].shape
    length = shape[0]
    columns = moved[0].size // length
    span = 1 << max(length - 1, 1).bit_length()
    if columns > 1:
        out = _bitonic([m.reshape(length, columns) for m in moved], span, span)
    else:
        rows = min(NETWORK_ROWS, span)
        width = -(-length // rows)
        grids = [_pad(m.reshape(length), 0, rows * width).reshape(width, rows).T for m in moved]
        out = [o.T.reshape(-1)[:length] for o in _bitonic(grids, rows, span)]  # i at (i % rows, i // rows)
    out = [jnp.moveaxis(o.reshape(shape), 0, axis) for o in out]
    return out[0] if payload is None else tuple(out)


def _pad(a, axis: int, size: int):
    """Integer `a` extended along `axis` to `size` with its dtype's largest value."""
    missing = size - a.shape[axis]
    if missing <= 0:
        return a
    shape = a.shape[:axis] + (missing,) + a.shape[axis + 1 :]
    return jnp.concatenate([a, jnp.full(shape, np.iinfo(a.dtype).max, a.dtype)], axis)


def _bitonic(arrays, rows: int, span: int):
    """Sort `arrays[0] (r, c)` as sequences of `span` indices i = row + `rows` x column, all
    ascending, the other arrays (payloads, same shape) permuted with it.

    The keys at the indices the arrays leave out (rows r..`rows`, columns c..) count as the
    largest key. Batcher's network in its one-direction form: merging two sorted halves of a
    block of size b first compares i with its mirror image in the block, then i with i + b/4,
    i + b/8, ..., 1, every pair ascending (swapped only when the second is smaller). A missing
    index is never compared with a smaller one and never moves, so each stage only runs over
    the blocks that hold data. Two consecutive stages whose pairs lie in the same axis run as
    one (one pass over memory instead of two).
    """
    arrays = list(arrays)
    size = 2
    while size <= span:
        block = size
        while block >= 2:
            fused = block >= 4 and (block // 2 > rows or block <= rows)
            arrays = _stages(arrays, rows, block, mirror=block == size, fused=fused)
            block //= 4 if fused else 2
        size *= 2
    return arrays


def _stages(arrays, rows: int, block: int, *, mirror: bool, fused: bool):
    """The compare-exchange stage of `_bitonic` over blocks of `block` indices (mirror pairs
    or i, i + block / 2), and with `fused` the next stage (i, i + block / 4) too."""
    if block <= rows:  # pairs inside each column
        axis, units = 0, block
    else:  # pairs of whole columns (their rows reversed by a mirror)
        axis, units = 1, block // rows
    parts = 4 if fused else 2
    length = arrays[0].shape[axis]
    padded = -(-length // units) * units  # whole blocks
    flips = ((axis + 1,) if axis == 0 else (0, axis + 1)) if mirror else ()
    wires = []  # wires[w][a]: quarter (or half) w of every block, of array a
    for a in arrays:
        shape = a.shape[:axis] + (padded // units, parts, units // parts) + a.shape[axis + 1 :]
        v = _pad(a, axis, padded).reshape(shape)
        wires.append([jnp.take(v, w, axis=axis + 1) for w in range(parts)])
    wires = [list(w) for w in zip(*wires, strict=True)]

    def exchange(i, j, mirrored):
        """Smaller key into wire i, larger into wire j (wire j read and written reversed if `mirrored`)."""
        first = wires[i]
        second = [jnp.flip(a, flips) for a in wires[j]] if mirrored else wires[j]
        low, high = [jnp.minimum(first[0], second[0])], [jnp.maximum(first[0], second[0])]
        if len(first) > 1:
            swap = second[0] < first[0]
            low += [jnp.where(swap, b, a) for a, b in zip(first[1:], second[1:], strict=True)]
            high += [jnp.where(swap, a, b) for a, b in zip(first[1:], second[1:], strict=True)]
        wires[i], wires[j] = low, ([jnp.flip(a, flips) for a in high] if mirrored else high)

    half = parts // 2
    for i in range(half):  # the first stage: i with its mirror, or with i + block / 2
        exchange(i, parts - 1 - i if flips else i + half, bool(flips))
    if fused:  # the second: i with i + block / 4 inside each half
        exchange(0, 1, False)
        exchange(2, 3, False)
    out = []
    for k, a in enumerate(arrays):
        full_shape = a.shape[:axis] + (padded,) + a.shape[axis + 1 :]
        stacked = jnp.stack([wires[w][k] for w in range(parts)], axis + 1).reshape(full_shape)
        out.append(lax.slice_in_dim(stacked, 0, length, axis=axis))
    return out


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
