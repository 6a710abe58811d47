"""Pools: resumability after a kill, augmentation, storage checks and task-config errors."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import jax.numpy as jnp
import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.reference import pool, store

ARGS = dict(seed=3, num_chunks=4, chunk_size=6, augment=True, progress=False)


@pytest.fixture(scope="module")
def task():
    return tasks.get("poisson_fixed", resolution=8, num_sensors=5)


@pytest.fixture(scope="module")
def full(task, tmp_path_factory):
    return pool.build(task, tmp_path_factory.mktemp("full"), **ARGS)


def test_resume_after_interruption_is_exact(task, full, tmp_path):
    pool.build(task, tmp_path, **ARGS, max_new_chunks=2)
    (tmp_path / ".chunk_000002.npz.123.tmp").write_bytes(b"torn")  # a write cut by a kill
    (tmp_path / "chunk_000003.npz").write_bytes(b"torn")  # data without its sidecar: not done
    part = pool.Pool.open(tmp_path, task)
    assert part.done_chunks() == [0, 1] and not part.complete
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("chunk_00000[01].*")}
    resumed = pool.build(task, tmp_path, **ARGS)
    assert resumed.complete and resumed.size == full.size == 4 * 6 * 4
    assert before == {
        p.name: p.stat().st_mtime_ns for p in tmp_path.glob("chunk_00000[01].*")
    }  # not recomputed
    for field in ("x", "u", "y"):
        np.testing.assert_array_equal(resumed.load(field), full.load(field))


def test_killed_process_resumes_exactly(task, full, tmp_path):
    script = textwrap.dedent(f"""
        import time
        from posteriorjax import files, tasks
        from posteriorjax.reference import pool
        task = tasks.get("poisson_fixed", resolution=8, num_sensors=5)
        slow = files.write_arrays
        def delayed(*a, **k):
            out = slow(*a, **k); time.sleep(0.5); return out
        files.write_arrays = delayed
        pool.build(task, {str(tmp_path)!r}, **{ARGS!r})
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=os.getcwd())
    try:
        deadline = time.time() + 120
        while not (tmp_path / "chunk_000001.json").exists():
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert not pool.Pool.open(tmp_path).complete
    resumed = pool.build(task, tmp_path, **ARGS)
    np.testing.assert_array_equal(resumed.load("x"), full.load("x"))
    np.testing.assert_array_equal(resumed.load("y"), full.load("y"))


def test_rotations_are_prior_pairs(task, full):
    x, u = full.read_chunk(0)["x"], full.read_chunk(0)["u"]
    b = ARGS["chunk_size"]
    for k in range(4):  # rotation-major blocks; u of a rotated field is the solve of that field
        np.testing.assert_array_equal(x[k * b : (k + 1) * b], np.rot90(x[:b], k, axes=(-2, -1)))
        solved = np.stack([np.asarray(task.physics(jnp.asarray(xi))) for xi in x[k * b : k * b + 2]])
        np.testing.assert_allclose(u[k * b : k * b + 2], solved, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(full.gather([1, 30], "x"), full.load("x")[[1, 30]])


def test_mismatches_are_errors(task, full, tmp_path):
    other = tasks.get("poisson_fixed", resolution=8, num_sensors=6)
    with pytest.raises(ValueError, match="task"):
        pool.Pool.open(full.directory, other)
    with pytest.raises(ValueError, match="task"):
        pool.build(other, full.directory, **ARGS)
    with pytest.raises(ValueError, match="other settings"):
        pool.build(task, full.directory, **{**ARGS, "chunk_size": 7})
    with pytest.raises(ValueError, match="num_chunks"):
        pool.build(task, tmp_path, **{**ARGS, "num_chunks": 0})
    ccs_like = tasks.get("darcy", resolution=8, num_sensors=5)
    pool.check_equivariance(ccs_like, __import__("jax").random.key(0))  # Darcy is equivariant
    ref = store.Reference(full.load("x")[:3], np.full(3, 1 / 3), "test", 0)
    store.save_reference(tmp_path / "ref", ref, task)
    assert store.load_reference(tmp_path / "ref", task).size == 3
    with pytest.raises(ValueError, match="task"):
        store.load_reference(tmp_path / "ref", other)
    data = tmp_path / "ref" / "reference.npz"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum"):
        store.load_reference(tmp_path / "ref", task)


def test_field_reads_verify_only_what_they_read(task, full, tmp_path):
    copy = tmp_path / "pool"
    shutil.copytree(full.directory, copy)
    p = pool.Pool.open(copy, task)
    np.testing.assert_array_equal(p.read_chunk(1, ("y",))["y"], full.read_chunk(1)["y"])
    path = copy / "chunk_000001.npz"
    raw = bytearray(path.read_bytes())
    x_bytes = full.read_chunk(1)["x"].tobytes()
    raw[raw.find(x_bytes) + len(x_bytes) // 2] ^= 0xFF  # flip one byte inside the stored x
    path.write_bytes(bytes(raw))
    np.testing.assert_array_equal(p.read_chunk(1, ("y",))["y"], full.read_chunk(1)["y"])
    with pytest.raises(ValueError, match="checksum mismatch for 'x'"):
        p.read_chunk(1, ("x",))
    with pytest.raises(ValueError, match="checksum"):
        p.read_chunk(1)
    with pytest.raises(ValueError, match="fields"):
        p.read_chunk(0, ("v",))


def test_observation_only_pool_redraws_the_stored_draws(task, full, tmp_path):
    slim = pool.build(task, tmp_path, **ARGS, store_state=False, store_unknown=False)
    assert sorted(np.load(tmp_path / "chunk_000000.npz").files) == ["y"]
    np.testing.assert_array_equal(slim.load("y"), full.load("y"))
    np.testing.assert_allclose(slim.load("x"), full.load("x"), rtol=1e-6, atol=1e-6)
    picks = [0, 7, 30, 95]  # across chunks and rotation blocks
    np.testing.assert_allclose(slim.gather(picks, "x"), full.load("x")[picks], rtol=1e-6, atol=1e-6)
    whole = slim.read_chunk(1)
    assert sorted(whole) == ["x", "y"]
    np.testing.assert_allclose(whole["x"], full.read_chunk(1)["x"], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="Pool.open"):
        pool.Pool.open(tmp_path).gather([0], "x")
    with pytest.raises(ValueError, match="other settings"):
        pool.build(task, tmp_path, **ARGS, store_state=False)
