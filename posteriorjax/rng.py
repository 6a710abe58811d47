"""Standard normal draws equal bit for bit to `jax.random.normal`, with the rounds unrolled on a CPU.

`jax.random.normal(key, shape)` with the default Threefry key hashes the flat index of
every output element with Threefry-2x32 (Salmon et al. 2011, "Parallel random numbers: as
easy as 1, 2, 3", 20 rounds, key schedule k0, k1, k0 ^ k1 ^ 0x1BD11BDA), XORs the two
output words (64-bit dtypes: concatenates them), keeps the top mantissa bits as a uniform
u in [-1, 1) and returns sqrt(2) erfinv(u). On the CPU backend JAX emits the 20 rounds as
a rolled 5-iteration loop whose rotation amounts are loop-carried (it keeps compile times
down), which materializes the state between iterations and shifts by variable amounts, so it runs
several times slower than the same rounds unrolled into one fused elementwise kernel (the
timings: docs/studies/performance.md, "White noise").

`normal` computes the same bits with the rounds unrolled (constant rotations, one
fusion) wherever the result is provably the same: the CPU backend, a ``threefry2x32``
key, `jax_threefry_partitionable` on (the default since JAX 0.5), a real 32- or 64-bit
dtype and fewer than 2^32 elements. Anywhere else it is `jax.random.normal`. The
equality is pinned by tests against `jax.random.normal` (keys typed and raw, vmapped,
float32 and float64), so a JAX release that changed its stream would fail them.
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax

# Threefry-2x32 rotation constants, alternating every four rounds (Random123's R_32x2).
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def threefry2x32(k0, k1, x0, x1) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds of the uint32 counter pair (x0, x1) under key (k0, k1).

    All four broadcast together; returns the two uint32 output words. Key injection after
    every four rounds s (s = 1..5): x0 += ks[s % 3], x1 += ks[(s + 1) % 3] + s, with
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA).
    """
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for s in range(1, 6):
        for r in _ROTATIONS[(s - 1) % 2]:
            x0 = x0 + x1
            x1 = lax.shift_left(x1, np.uint32(r)) | lax.shift_right_logical(x1, np.uint32(32 - r))
            x1 = x0 ^ x1
        x0 = x0 + ks[s % 3]
        x1 = x1 + ks[(s + 1) % 3] + np.uint32(s)
    return x0, x1


def _unrolled_applies(key, shape: tuple[int, ...], dtype) -> bool:
    """Whether `_normal_unrolled` reproduces `jax.random.normal(key, shape, dtype)` here."""
    if jax.default_backend() != "cpu" or not jax.config.jax_threefry_partitionable:
        return False
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jr.key_impl(key)) if key.shape == () else None
    elif key.dtype == np.uint32 and key.shape == (2,):
        impl = str(jax.config.jax_default_prng_impl)
    else:
        impl = None  # not one key: jax.random.normal raises its own error
    size = int(np.prod(shape, dtype=np.int64))
    return impl == "threefry2x32" and dtype in (np.float32, np.float64) and 0 < size < 2**32


# Jitted like `jax.random.normal`'s own `_normal`: an eager call then compiles one program
# per (shape, dtype), not each of the hash's ~100 operations separately.
@functools.partial(jax.jit, static_argnums=(1, 2))
def _normal_unrolled(key, shape: tuple[int, ...], dtype) -> jax.Array:
    words = jr.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    k0, k1 = words[0], words[1]
    # The 64-bit counter of every element is its flat index: high word 0 below 2^32 elements.
    lo = lax.iota(np.uint32, int(np.prod(shape))).reshape(shape)
    b0, b1 = threefry2x32(k0, k1, jnp.zeros_like(lo), lo)
    finfo = jnp.finfo(dtype)
    if finfo.bits == 32:
        bits, uint = b0 ^ b1, np.uint32
    else:
        uint = np.uint64
        bits = lax.shift_left(b0.astype(uint), uint(32)) | b1.astype(uint)
    # Uniform in [1, 2) from the top mantissa bits, then affine onto [lo, 1) as in jax.random.uniform.
    one = np.array(1.0, dtype)
    mantissa = lax.shift_right_logical(bits, uint(finfo.bits - finfo.nmant)) | one.view(uint)
    floats = lax.bitcast_convert_type(mantissa, dtype) - jnp.array(1.0, dtype)
    low = jnp.array(np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype)), dtype)
    high = jnp.array(1.0, dtype)
    u = lax.max(low, floats * (high - low) + low)
    return lax.mul(np.array(np.sqrt(2), dtype), lax.erf_inv(u))


def normal(key, shape=(), dtype=None) -> jax.Array:
    """Standard normal `shape` array of `dtype` (default float), equal to `jax.random.normal`.

    Args:
      key: a typed PRNG key (`jax.random.key`) or a raw uint32 `(2,)` key; one key, so map
        over a batch of keys with `jax.vmap`.
      shape: the output shape, a tuple of non-negative integers.
      dtype: a floating dtype; ``None`` gives JAX's default float (float32 unless x64).
    """
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape: expected a tuple of non-negative integers, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"shape: expected a tuple of non-negative integers, got {shape!r}")
    dtype = jax.dtypes.canonicalize_dtype(float if dtype is None else dtype)
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if not _unrolled_applies(key, shape, dtype):
        return jr.normal(key, shape, dtype)
    return _normal_unrolled(key, shape, dtype)
