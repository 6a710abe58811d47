"""Several CPU devices: the sweep's sharded program with batched LAPACK calls finishes.

Forced CPU devices share one intra-op thread pool; jaxlib's batched LAPACK kernels
block their calling pool thread until the pool has run the batch, so with as many
device programs as pool threads the process deadlocks (`posteriorjax.parallel`).
The subprocess below pins the pool the client would build to 2 threads (`NPROC=2`,
as on a 2-core machine) whatever the host, forces 2 devices, and runs
`sweep.program.chunk_program` over a per-configuration FFT -> Cholesky solve; without
`parallel.reserve_cpu_threads` it hangs on its first call.
"""

import json
import os
import subprocess
import sys
import textwrap
import types
import warnings

import pytest

from posteriorjax import parallel

_SCRIPT = textwrap.dedent(
    """
    import faulthandler, json, os, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from posteriorjax import parallel
    threads = parallel.reserve_cpu_threads()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from posteriorjax.sweep import program as sweep_program

    M = 256  # large enough for jaxlib to split a batch of two factorizations over the pool


    def one(data, config):
        g = jax.random.normal(jax.random.fold_in(data["key"], config["index"]), (64, M))
        g = jnp.fft.irfft(jnp.fft.rfft(g, axis=-1), n=M, axis=-1)
        ga = g - g.mean(0)
        c = ga.T @ ga / 63 + 0.1 * jnp.eye(M)
        return {"x": jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(c), data["b"]), "c": c}


    mesh = parallel.data_mesh()
    program = jax.jit(sweep_program.chunk_program(one, mesh, batch_size=4))
    data = {"key": jax.random.key(0), "b": jnp.linspace(-1.0, 1.0, M)}
    configs = {"index": jnp.arange(4)}  # two configurations per device: one batch of two each
    for _ in range(3):
        out = jax.block_until_ready(program(data, configs))
    x, c = np.asarray(out["x"], np.float64), np.asarray(out["c"], np.float64)
    residual = max(
        float(np.abs(c[i] @ x[i] - np.asarray(data["b"])).max()) for i in range(4)
    )
    print(json.dumps({"threads": threads, "devices": jax.device_count(), "residual": residual}))
    """
)


@pytest.fixture(scope="module")
def two_devices():
    flags = "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0"  # as conftest
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "JAX_NUM_CPU_DEVICES")}
    env.update(XLA_FLAGS=flags, JAX_PLATFORMS="cpu", NPROC="2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=90
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"2-device program did not finish in 90 s (deadlock?): {str(e.stderr)[-2000:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_two_cpu_devices_with_batched_cholesky_finish(two_devices):
    """The pool is reserved above the device count and the solves are right."""
    assert two_devices["devices"] == 2
    assert two_devices["threads"] == 3  # max(NPROC=2, 2 devices + 1)
    assert two_devices["residual"] < 1e-3


def test_forced_cpu_devices_reads_flag_and_option():
    assert parallel.forced_cpu_devices({}) == 1
    flags = "--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=4"
    assert parallel.forced_cpu_devices({"XLA_FLAGS": flags}) == 4
    assert parallel.forced_cpu_devices({"XLA_FLAGS": flags, "JAX_NUM_CPU_DEVICES": "2"}) == 2
    assert parallel.forced_cpu_devices({"XLA_FLAGS": flags, "JAX_NUM_CPU_DEVICES": "-1"}) == 4
    with pytest.raises(ValueError, match="XLA_FLAGS"):
        parallel.forced_cpu_devices({"XLA_FLAGS": "--xla_force_host_platform_device_count=four"})
    with pytest.raises(ValueError, match="JAX_NUM_CPU_DEVICES"):
        parallel.forced_cpu_devices({"JAX_NUM_CPU_DEVICES": "x"})


def test_reserve_cpu_threads_only_raises_an_unset_pool():
    flags = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    env = {**flags, "NPROC": "2"}
    assert parallel.reserve_cpu_threads(env) == 5 and env["PJRT_NPROC"] == "5"
    env = {**flags, "NPROC": "16"}
    assert parallel.reserve_cpu_threads(env) == 16 and env["PJRT_NPROC"] == "16"
    env = {**flags, "PJRT_NPROC": "2"}  # an explicit choice is kept
    assert parallel.reserve_cpu_threads(env) is None and env["PJRT_NPROC"] == "2"
    env = {"NPROC": "2"}  # one device: nothing to reserve
    assert parallel.reserve_cpu_threads(env) is None and "PJRT_NPROC" not in env
    assert parallel.cpu_pool_threads({"PJRT_NPROC": "3", "NPROC": "7"}) == 3
    with pytest.raises(ValueError, match="PJRT_NPROC"):
        parallel.cpu_pool_threads({"PJRT_NPROC": "0"})


def test_check_cpu_threads_warns_when_cpu_devices_fill_the_pool(monkeypatch):
    cpus = [types.SimpleNamespace(platform="cpu", process_index=0, id=i) for i in range(2)]
    gpus = [types.SimpleNamespace(platform="gpu", process_index=0, id=i) for i in range(2)]
    monkeypatch.setenv("PJRT_NPROC", "2")
    with pytest.warns(RuntimeWarning, match="PJRT_NPROC>=3"):
        parallel.check_cpu_threads(cpus)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel.check_cpu_threads(cpus[:1])  # one device cannot starve the pool
        parallel.check_cpu_threads(gpus)
        monkeypatch.setenv("PJRT_NPROC", "3")
        parallel.check_cpu_threads(cpus)
