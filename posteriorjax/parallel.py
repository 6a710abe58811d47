"""Meshes and shardings: one data axis over every device of every host.

The batch axis of a computation (pool chunk, sweep configurations) is sharded
over a 1-D `Mesh` named ``"data"``; arrays are padded to a multiple of the device
count and the padding is dropped afterwards. With one device this is a no-op, so
the same code runs on a laptop CPU, a GPU or a TPU pod (after
`jax.distributed.initialize()`, which only entry points call).

Several CPU devices (``--xla_force_host_platform_device_count=N`` or
``jax_num_cpu_devices``) share one intra-op thread pool, by default one thread per
schedulable core. Since jaxlib 0.10 the CPU LAPACK kernels (Cholesky, triangular
solve, LU, QR, eigh, SVD, ...) hand a batch of several large enough matrices (e.g. a
vmapped 128 x 128 Cholesky) to that pool in pieces and block the calling thread until
they are done; when every pool thread is such a caller (one per concurrently running
device program) nothing is left to run the pieces and the process hangs with all
threads idle. (One program does the same when it runs more independent batched
factorizations at once than the pool has threads; jaxlib, not the mesh, is the cause.)
`reserve_cpu_threads`, called by an entry point before JAX starts, sizes the pool
above the device count; `data_mesh` warns when a CPU mesh has as many devices as the
pool has threads.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import MutableMapping
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

AXIS = "data"
CACHE_VARIABLE = "POSTERIORJAX_COMPILATION_CACHE"  # a directory, or "off"


_THREAD_VARIABLES = ("PJRT_NPROC", "NPROC")  # read, in this order, by the XLA CPU client


def _schedulable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_pool_threads(environ: MutableMapping[str, str] | None = None) -> int:
    """Threads of the XLA CPU client's intra-op pool: `PJRT_NPROC`, else `NPROC`, else the schedulable cores.

    The client reads these variables once, when JAX starts its CPU backend.
    """
    environ = os.environ if environ is None else environ
    for name in _THREAD_VARIABLES:
        value = environ.get(name, "")
        if value.strip():
            try:
                threads = int(value)
            except ValueError:
                raise ValueError(f"{name}: expected an integer number of threads, got {value!r}") from None
            if threads < 1:
                raise ValueError(f"{name}: expected a positive number of threads, got {threads}")
            return threads
    return _schedulable_cores()


def forced_cpu_devices(environ: MutableMapping[str, str] | None = None) -> int:
    """CPU devices JAX will create, as requested before start-up (1 when nothing is requested).

    `JAX_NUM_CPU_DEVICES` (the `jax_num_cpu_devices` option; -1 means unset) takes
    precedence over `--xla_force_host_platform_device_count=N` in `XLA_FLAGS`, as in JAX.
    """
    environ = os.environ if environ is None else environ
    requested = environ.get("JAX_NUM_CPU_DEVICES", "").strip()
    if requested:
        try:
            count = int(requested)
        except ValueError:
            raise ValueError(f"JAX_NUM_CPU_DEVICES: expected an integer, got {requested!r}") from None
        if count >= 0:
            return max(count, 1)
    flags = re.findall(r"--xla_force_host_platform_device_count=(\S*)", environ.get("XLA_FLAGS", ""))
    if not flags:
        return 1
    try:
        return max(int(flags[-1]), 1)
    except ValueError:
        raise ValueError(
            f"XLA_FLAGS: expected an integer --xla_force_host_platform_device_count, got {flags[-1]!r}"
        ) from None


def reserve_cpu_threads(environ: MutableMapping[str, str] | None = None) -> int | None:
    """Size the CPU intra-op pool above the forced CPU device count (entry points, before JAX starts).

    With N > 1 forced CPU devices and no `PJRT_NPROC` set, sets `PJRT_NPROC` to
    max(threads the pool would have, N + 1), so that N device programs each blocked in
    a batched LAPACK call leave a thread to run the batches (module doc). With one
    device, or `PJRT_NPROC` already set, nothing changes. Only the CPU client's pool
    sizes follow the variable; it has no effect once JAX's backends have started.

    Returns:
      The `PJRT_NPROC` value set, or None when nothing was changed.
    """
    environ = os.environ if environ is None else environ
    devices = forced_cpu_devices(environ)
    if devices <= 1 or environ.get("PJRT_NPROC", "").strip():
        return None
    threads = max(cpu_pool_threads(environ), devices + 1)
    environ["PJRT_NPROC"] = str(threads)
    return threads


def check_cpu_threads(devices) -> None:
    """Warn when `devices` hold as many or more local CPU devices than the CPU intra-op pool has threads."""
    local = [d for d in devices if d.platform == "cpu" and d.process_index == jax.process_index()]
    threads = cpu_pool_threads()
    if len(local) > 1 and len(local) >= threads:
        warnings.warn(
            f"devices: {len(local)} CPU devices share an intra-op pool of {threads} threads; batched "
            "linear algebra (LAPACK) in their programs can deadlock. Start the process with "
            f"PJRT_NPROC>={len(local) + 1} (posteriorjax.parallel.reserve_cpu_threads before JAX starts) "
            "or use fewer CPU devices.",
            RuntimeWarning,
            stacklevel=3,
        )


def data_mesh(devices=None) -> jax.sharding.Mesh:
    """1-D mesh over `devices` (default: all devices of all processes).

    Warns (`check_cpu_threads`) when several CPU devices would exhaust the CPU intra-op pool.
    """
    devices = jax.devices() if devices is None else list(devices)
    check_cpu_threads(devices)
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


def _pad_leading(tree, size: int):
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
    padded = _pad_leading(tree, padded_size(size, mesh))
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


def enable_compilation_cache(path=None, *, min_compile_time_s: float = 1.0) -> Path | None:
    """Turn on JAX's persistent compilation cache (entry points call this once, before compiling).

    The directory is `path`, else `$POSTERIORJAX_COMPILATION_CACHE`, else
    ``~/.cache/posteriorjax/xla``: shared by every workdir, so a rerun in a fresh
    workdir reuses the executables. Programs that compiled in at least
    `min_compile_time_s` are written. ``POSTERIORJAX_COMPILATION_CACHE=off`` disables
    it; an unwritable directory warns and leaves the cache off. Returns the directory
    in use, or None.

    JAX never writes a program with host callbacks (`jax/_src/compiler.py`, `_cache_write`:
    "uses host callbacks"), and a traced `eqx.error_if` is one (a `jax.pure_callback` under
    ``EQX_ON_ERROR=raise``). The package's run-time checks (`checks.error_if`) are such a
    callback only in programs not wrapped in `deferred.functionalize`; the sweep's chunk
    program and its sample program are wrapped (their checks are outputs raised on the host),
    so they are written too.
    """
    setting = path if path is not None else os.environ.get(CACHE_VARIABLE, "")
    if str(setting).strip().lower() == "off":
        return None
    directory = Path(setting or Path.home() / ".cache" / "posteriorjax" / "xla").expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        message = f"path: compilation cache directory {directory} is unusable ({error}); cache off"
        warnings.warn(message, stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory
